"""Mini DeepSeek-V3 671B: mixture of experts with shared experts and multi-head latent attention, pretrained
on a generated language to a log-perplexity target.

The real benchmark pretrains DeepSeek-V3 (61 layers: 3 dense, then mixtures of 1 shared and 256 routed
experts of which every token uses 8; multi-head latent attention) on C4 and stops at a held-out log
perplexity of 3.6. The mini keeps its defining parts, scaled down:

- multi-head latent attention (mlrepro.training.decoder.LatentAttention): keys and values come from one
  compressed latent per token, the position from a small rotary key shared by the heads, and queries
  through their own low-rank bottleneck; decoding caches only the latent and the rotary key;
- the first block keeps a dense SwiGLU; the others are mixtures of one shared expert, which every token
  goes through, and routed experts (top 2 of 8 here) with a capacity and the load-balancing loss
  (moe_aux_loss_coeff, 0.01 as in the closed rules);
- optimizer, schedule and metric are the llama31 minis' (mlrepro.training.language_model); the weights
  start from a wider normal (init_std) than the 0.02 of width-thousands models, which a 32-wide model
  learns from in fewer steps.

Left out: the auxiliary-loss-free bias balancing and sigmoid gate, multi-token prediction, FP8 training
and the 4096-token context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mlrepro.training.language_model import PretrainWorkload, decoder_config, generate_text_data

generate_data = generate_text_data


class Workload(PretrainWorkload):
    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        moe, mla = params["moe"], params["mla"]
        config = decoder_config(params, experts=moe["experts"], top_k=moe["top_k"],
                                capacity_factor=moe["capacity_factor"], shared_experts=moe["shared_experts"],
                                dense_layers=moe["dense_layers"], kv_rank=mla["kv_rank"], q_rank=mla["q_rank"],
                                rope_dim=mla["rope_dim"])
        super().__init__(data_dir, params, device, seed, config)
        self.hyperparameters["moe_aux_loss_coeff"] = self.aux_loss_coeff
