"""Mini DLRM-DCNv2: click-through-rate prediction on generated multi-hot click logs, trained to a ROC AUC target.

The real benchmark (MLPerf Training v3.0 on) trains DLRM with a DCNv2 interaction on the Criteo multi-hot
dataset: the Criteo 1TB click logs (13 dense, 26 categorical features, one click label) with each
categorical feature made multi-hot (1 to 100 values per row, fixed per feature); embedding bags sum each
feature's values; a bottom MLP (512-256-128) maps the dense features to the embeddings' width; the
interaction is a low-rank cross network (3 layers, rank 512) over the concatenated vectors; a top MLP
(1024-1024-512-256-1) gives the logit; Adagrad trains it, and a run stops when the ROC AUC on the
held-out day reaches 0.80275. This mini keeps the model's form and the recipe and scales the rest down:

- the model is DLRM-DCNv2 itself: one ``EmbeddingBag`` (sum) per multi-hot feature, the bottom MLP, the
  cross layers ``x_{l+1} = x_0 * (U_l (V_l x_l) + b_l) + x_l`` on ``x_0`` = [bottom output, bags], the
  top MLP on the last cross layer's output;
- the loss binary cross-entropy, the optimizer Adagrad (no warmup, no decay, as the reference), the metric
  the ROC AUC, computed exactly;
- the click logs come from the hidden model dlrm's generator uses (mlrepro/training/clicks.py), each
  feature drawing ``multi_hot_sizes[i]`` values per row.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mlrepro.training.clicks import ClickWorkload, linear_names, mlp, write_click_logs


# ---------------------------------------------------------------------------------------- data
def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    d = params["data"]
    if len(d["multi_hot_sizes"]) != d["categorical_features"]:
        raise ValueError(f"data.multi_hot_sizes: {len(d['multi_hot_sizes'])} sizes for "
                         f"{d['categorical_features']} categorical features; give one per feature")
    write_click_logs(out_dir, d, seed, hotness=d["multi_hot_sizes"])


# --------------------------------------------------------------------------------------- model
class CrossLayer(nn.Module):
    """One low-rank DCNv2 cross layer (torchrec's LowRankCrossNet layer): ``x0 * (U(V x) + b) + x``."""

    def __init__(self, width: int, rank: int) -> None:
        super().__init__()
        self.V = nn.Linear(width, rank, bias=False)
        self.U = nn.Linear(rank, width)

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x0 * self.U(self.V(x)) + x


class DLRMDCNv2(nn.Module):
    def __init__(self, n_dense: int, hotness: list[int], card: int, dim: int, bottom: list[int], top: list[int],
                 cross_layers: int, rank: int) -> None:
        super().__init__()
        self.hotness = list(hotness)
        # One bag per feature, summing its values (the reference's pooling)
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(card, dim, mode="sum") for _ in hotness)
        for e in self.embeddings:  # the reference's uniform(-1/sqrt(n), 1/sqrt(n)) for a table of n rows
            nn.init.uniform_(e.weight, -1 / math.sqrt(card), 1 / math.sqrt(card))
        self.bottom = mlp([n_dense, *bottom, dim], last_relu=True)
        width = dim * (len(hotness) + 1)
        self.cross = nn.ModuleList(CrossLayer(width, rank) for _ in range(cross_layers))
        self.top = mlp([width, *top, 1], last_relu=False)

    def forward(self, dense: torch.Tensor, cats: torch.Tensor) -> torch.Tensor:
        bags = torch.split(cats, self.hotness, dim=1)  # each feature's columns: (b, hotness_i) values
        x0 = torch.cat([self.bottom(dense)] + [e(bag) for e, bag in zip(self.embeddings, bags, strict=True)], dim=1)
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        return self.top(x).squeeze(1)  # a logit; the sigmoid is in the loss

    def reference_names(self) -> list[str]:
        """The tensors under the closed rules' names: all tables count as one, "embeddings"."""
        return ["embeddings", *linear_names("bottom_mlp_dense", self.bottom),
                *[f"interaction_cross_layer{i + 1}" for i in range(len(self.cross))],
                *linear_names("top_mlp_dense", self.top)]


# ------------------------------------------------------------------------------------ workload
class Workload(ClickWorkload):
    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        super().__init__(data_dir, device, seed)
        d = params["data"]
        self.model = DLRMDCNv2(d["dense_features"], d["multi_hot_sizes"], d["cardinality"], params["embedding_dim"],
                               params["bottom_mlp"], params["top_mlp"], params["cross_layers"],
                               params["cross_rank"]).to(device)
        self.batch = params["batch_size"]
        eps = 1e-8
        self.optimizer = torch.optim.Adagrad(self.model.parameters(), lr=params["lr"], lr_decay=0, weight_decay=0,
                                             initial_accumulator_value=0, eps=eps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: 1.0)  # no warmup, no decay
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "opt_name": "adagrad",
            "opt_base_learning_rate": params["lr"],
            "opt_adagrad_learning_rate_decay": 0,
            "opt_weight_decay": 0,
            "opt_adagrad_initial_accumulator_value": 0,
            "opt_adagrad_epsilon": eps,
            "opt_learning_rate_warmup_steps": 0,
            "opt_learning_rate_decay_start_step": 0,
            "opt_learning_rate_decay_steps": 0,
        }
