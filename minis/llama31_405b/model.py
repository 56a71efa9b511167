"""Mini Llama 3.1 405B: the llama31_8b mini's decoder and recipe in a larger configuration.

The real benchmark pretrains Llama 3.1 405B (126 layers, width 16384, 128 query / 8 key-value heads)
on C4 from a checkpoint, and stops when the log perplexity on 5760 held-out sequences of 8192 tokens
reaches 5.6. The mini is the llama31_8b mini's code (mlrepro.training.decoder: RMSNorm, RoPE,
grouped-query attention, SwiGLU; AdamW with a linear warm-up and a cosine decay, clipped gradients)
with a wider, deeper model, a sparser key/value sharing (four query heads per key/value head) and a
larger language (more words, so more pairs of words to learn), scored on 5760 held-out sequences as
the reference. It starts from freshly initialised weights (init_checkpoint_step 0): the reference's
starting checkpoint is left out, with the tokenizer and the 8192-token context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mlrepro.training.language_model import PretrainWorkload, decoder_config, generate_text_data

generate_data = generate_text_data


class Workload(PretrainWorkload):
    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        super().__init__(data_dir, params, device, seed, decoder_config(params))
        self.hyperparameters["init_checkpoint_step"] = 0  # trained from initialisation, not resumed
