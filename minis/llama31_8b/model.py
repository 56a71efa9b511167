"""Mini Llama 3.1 8B: decoder pretraining on a generated language, trained to a held-out log-perplexity target.

The real benchmark pretrains Llama 3.1 8B (32 layers, width 4096, 32 query / 8 key-value heads) on C4
with sequences of 8192 tokens and stops when the log perplexity on 1024 held-out sequences reaches 3.3.
This mini keeps the architecture and the recipe, scaled down:

- the same decoder: token embeddings, pre-norm blocks of RMSNorm -> grouped-query attention with rotary
  position embeddings (theta 500000) and RMSNorm -> SwiGLU, a final RMSNorm and an untied output head;
- AdamW (beta 0.9/0.95, epsilon 1e-5, weight decay 0.1 on the matrices), a linear warm-up then a cosine
  decay to the end rate over the run's steps, gradients clipped at norm 1.0;
- the metric, mean next-token cross-entropy on 1024 held-out sequences, as the reference's.

C4 is replaced by a second-order Markov language (mlrepro.datasets.synthetic_text): its own log
perplexity on the held-out set (~0.55 nats) is the floor, a model seeing one word back cannot go under
~1.75, and the target 0.70 needs attention over the two previous positions. The tokenizer, the
8192-token context and the packing of documents are left out.
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
