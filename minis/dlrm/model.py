"""Mini DLRM: click-through-rate prediction on generated click logs, trained to a ROC AUC target.

The real benchmark trains DLRM on the Criteo 1TB click logs (13 dense and 26 categorical features
per impression, one click label) and stops when the ROC AUC on held-out days reaches 0.8025. This
mini workload keeps the model and the recipe and scales the rest down:

- the model is DLRM itself: one embedding table per categorical feature, a bottom MLP that maps the
  dense features to a vector of the embeddings' width, the pairwise dot products of all those
  vectors (the "interaction"), and a top MLP on [bottom output, dot products] that gives one logit;
- the loss is binary cross-entropy, the optimizer plain SGD with the reference's schedule (linear
  warmup, constant, then polynomial decay of power 2), the metric the ROC AUC, computed exactly;
- the click logs come from a hidden model of DLRM's own form (mlrepro/training/clicks.py, shared
  with dlrm_dcnv2): hidden vectors per category value and for the dense features, a click
  probability from their pairwise dot products; labels are drawn from it, so the target sits
  below what the hidden model itself reaches on the held-out rows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mlrepro.training.clicks import ClickWorkload, linear_names, mlp, write_click_logs
from mlrepro.training.clicks import roc_auc as roc_auc  # the inference stage scores with the module's roc_auc


# ------------------------------------------------------------------------------ data, metric
def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    write_click_logs(out_dir, params["data"], seed)


# --------------------------------------------------------------------------------------- model
class DLRM(nn.Module):
    def __init__(self, n_dense: int, n_cat: int, card: int, dim: int, bottom: list[int], top: list[int]) -> None:
        super().__init__()
        # One table per feature, as the reference (sharing one big table would mix the features' ids).
        self.embeddings = nn.ModuleList(nn.Embedding(card, dim) for _ in range(n_cat))
        for e in self.embeddings:  # the reference's uniform(-1/sqrt(n), 1/sqrt(n)) for a table of n rows
            nn.init.uniform_(e.weight, -1 / math.sqrt(card), 1 / math.sqrt(card))
        # The bottom MLP ends in the embeddings' width so its output joins the dot products.
        self.bottom = mlp([n_dense, *bottom, dim], last_relu=True)
        n_vec = n_cat + 1
        self.register_buffer("pairs", torch.tril_indices(n_vec, n_vec, offset=-1), persistent=False)
        self.top = mlp([dim + n_vec * (n_vec - 1) // 2, *top, 1], last_relu=False)

    def forward(self, dense: torch.Tensor, cats: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        vecs = torch.stack([x] + [e(cats[:, i]) for i, e in enumerate(self.embeddings)], dim=1)  # (b, F, dim)
        # Every distinct pair once: the strictly lower triangle of the Gram matrix.
        dots = torch.bmm(vecs, vecs.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)  # a logit; the sigmoid is in the loss

    def reference_names(self) -> list[str]:
        """The tensors under the closed rules' names: all tables count as one, "embeddings"."""
        return ["embeddings", *linear_names("bottom_mlp_dense", self.bottom), *linear_names("top_mlp_dense", self.top)]


# ------------------------------------------------------------------------------------ workload
class Workload(ClickWorkload):
    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        super().__init__(data_dir, device, seed)
        d = params["data"]
        self.model = DLRM(d["dense_features"], d["categorical_features"], d["cardinality"],
                          params["embedding_dim"], params["bottom_mlp"], params["top_mlp"]).to(device)
        self.batch = params["batch_size"]
        self.steps_per_epoch = math.ceil(len(self.labels) / self.batch)
        warmup, decay_start, decay_steps = params["warmup_steps"], params["decay_start_step"], params["decay_steps"]
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=params["lr"])

        # The reference's schedule: linear warmup, constant, then (1 - progress)^2 down to 0.
        def schedule(s: int) -> float:
            if s < warmup:
                return (s + 1) / warmup
            if s < decay_start:
                return 1.0
            return max(0.0, 1 - (s - decay_start) / decay_steps) ** 2

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "opt_name": "sgd",
            "opt_base_learning_rate": params["lr"],
            "sgd_opt_base_learning_rate": params["lr"],
            "opt_learning_rate_warmup_steps": warmup,
            "lr_decay_start_steps": decay_start,
            "opt_learning_rate_decay_start_step": decay_start,
            "sgd_opt_learning_rate_decay_steps": decay_steps,
            "opt_learning_rate_decay_steps": decay_steps,
            "sgd_opt_learning_rate_decay_poly_power": 2,
        }
