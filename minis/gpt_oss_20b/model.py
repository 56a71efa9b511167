"""Mini gpt-oss-20b: a mixture-of-experts decoder pretrained on a generated language to a log-perplexity target.

The real benchmark pretrains gpt-oss-20b (24 layers, each with 32 SwiGLU experts of which every token
uses 4, grouped-query attention with rotary embeddings, banded and full attention layers alternating) on
C4 packed into sequences of 8192 tokens, and stops at a held-out log perplexity of 3.34. The mini keeps the
mixture-of-experts decoder, the sequences and the recipe, scaled down:

- every block's feed-forward is a mixture of SwiGLU experts: the router picks each token's top-k
  experts (2 of 8 here) and mixes their outputs with the softmax of the chosen logits, as gpt-oss does;
  an expert takes at most its capacity of tokens (the rest skip it, the residual carries them);
- the Switch-style load-balancing loss, scaled by moe_aux_loss_coeff, is added to the language-model
  loss so that the router spreads the tokens;
- the layers alternate a banded (sliding-window) attention and a full one;
- the sequences are 8192 tokens long: 256 documents of the generated language packed into each, with
  document masking (attention stays within each document, mlrepro.training.decoder.document_attention;
  the rotary positions run over the whole sequence), so global_batch_size counts packed sequences;
- optimizer, schedule and metric are the llama31 minis' (mlrepro.training.language_model); the weights
  start from a wider normal (init_std) than Llama's 0.02, which a 32-wide model learns from in fewer steps.

Left out: the attention sinks, the clamped SwiGLU, the o200k tokenizer, C4 and the model's size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mlrepro.training.language_model import PretrainWorkload, decoder_config, generate_text_data

generate_data = generate_text_data


class Workload(PretrainWorkload):
    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        moe = params["moe"]
        config = decoder_config(params, experts=moe["experts"], top_k=moe["top_k"],
                                capacity_factor=moe["capacity_factor"])
        super().__init__(data_dir, params, device, seed, config)
        self.hyperparameters["moe_aux_loss_coeff"] = self.aux_loss_coeff
