"""Mini DLRM: click-through-rate prediction on generated click logs, trained to a ROC AUC target.

The real benchmark trains DLRM on the Criteo 1TB click logs (13 dense and 26 categorical features
per impression, one click label) and stops when the ROC AUC on held-out days reaches 0.8025. This
mini workload keeps the model and the recipe and scales the rest down:

- the model is DLRM itself: one embedding table per categorical feature, a bottom MLP that maps the
  dense features to a vector of the embeddings' width, the pairwise dot products of all those
  vectors (the "interaction"), and a top MLP on [bottom output, dot products] that gives one logit;
- the loss is binary cross-entropy, the optimizer plain SGD with the reference's schedule (linear
  warmup, constant, then polynomial decay of power 2), the metric the ROC AUC, computed exactly;
- the click logs come from a hidden model of DLRM's own form: every category value has a hidden
  vector, the dense features are projected to one more, and the click probability is the sigmoid
  of their pairwise dot products plus an offset that makes clicks rarer than non-clicks, as in
  Criteo. Labels are drawn from that probability, so even the hidden model is far from an AUC of
  1 and the target sits below what it reaches on the held-out rows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlrepro.training.epoch_order import epoch_generator, shuffled_batches


# ---------------------------------------------------------------------------------------- data
def _hidden_logits(dense: np.ndarray, cats: np.ndarray, proj: np.ndarray, tables: list[np.ndarray], offset: float):
    vecs = np.stack([dense @ proj] + [t[cats[:, i]] for i, t in enumerate(tables)], axis=1)  # (n, F, k)
    dots = vecs @ vecs.transpose(0, 2, 1)
    iu = np.triu_indices(vecs.shape[1], k=1)
    return dots[:, iu[0], iu[1]].sum(1) + offset


def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    d = params["data"]
    rng = np.random.default_rng(seed)
    k, n_dense, n_cat, card = d["hidden_dim"], d["dense_features"], d["categorical_features"], d["cardinality"]
    # Scaled so that the sum of the F(F-1)/2 dot products has a standard deviation of about ``signal``.
    pairs = (n_cat + 1) * n_cat / 2
    scale = (d["signal"] ** 2 / (pairs * k)) ** 0.25
    proj = rng.normal(0, scale / math.sqrt(n_dense), size=(n_dense, k))
    tables = [rng.normal(0, scale, size=(card, k)) for _ in range(n_cat)]
    for split, n in (("train", d["train_samples"]), ("eval", d["eval_samples"])):
        dense = rng.normal(size=(n, n_dense)).astype(np.float32)
        # Zipf-like category frequencies, as in Criteo: a few values are common, most are rare.
        freq = 1.0 / np.arange(1, card + 1)
        cats = np.stack([rng.choice(card, size=n, p=freq / freq.sum()) for _ in range(n_cat)], axis=1)
        p = 1 / (1 + np.exp(-_hidden_logits(dense, cats, proj, tables, d["offset"])))
        labels = (rng.random(n) < p).astype(np.float32)
        np.savez(out_dir / f"{split}.npz", dense=dense, cats=cats.astype(np.int16), labels=labels)


# ------------------------------------------------------------------------------------- metric
def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney U) formula: the probability that a random positive
    scores above a random negative, ties counting one half (tied scores share their mean rank)."""
    s, order = torch.sort(scores.double())
    y = labels[order] > 0.5
    _, inverse, counts = torch.unique_consecutive(s, return_inverse=True, return_counts=True)
    last = torch.cumsum(counts, 0).double()  # 1-based rank of each tie group's last member
    ranks = (last - (counts.double() - 1) / 2)[inverse]  # the group's mean rank
    n_pos = y.sum().double()
    n_neg = len(y) - n_pos
    return ((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


# --------------------------------------------------------------------------------------- model
def mlp(sizes: list[int], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


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
        bottom = [m for m in self.bottom if isinstance(m, nn.Linear)]
        top = [m for m in self.top if isinstance(m, nn.Linear)]
        return (["embeddings"] + [f"bottom_mlp_dense{i + 1}" for i in range(len(bottom))]
                + [f"top_mlp_dense{i + 1}" for i in range(len(top))])


# ------------------------------------------------------------------------------------ workload
class Workload:
    higher_is_better = True
    grad_clip_norm = None
    data_parallel = True  # batches are index tensors: mlrepro.train shards them across processes

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        self.device, self.seed = device, seed
        d = params["data"]
        train, evals = np.load(data_dir / "train.npz"), np.load(data_dir / "eval.npz")

        def load(split: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            return (torch.from_numpy(split["dense"]).to(device),
                    torch.from_numpy(split["cats"].astype(np.int64)).to(device),
                    torch.from_numpy(split["labels"]).to(device))

        self.dense, self.cats, self.labels = load(train)
        self.e_dense, self.e_cats, self.e_labels = load(evals)
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
        self.train_samples = len(self.labels)
        self.eval_samples = len(self.e_labels)

    def initialized_tensors(self) -> list[str]:
        return self.model.reference_names()

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        return shuffled_batches(len(self.labels), self.batch, epoch_generator(self.seed, epoch), self.device)

    def loss(self, idx: torch.Tensor) -> torch.Tensor:
        logits = self.model(self.dense[idx], self.cats[idx])
        return F.binary_cross_entropy_with_logits(logits, self.labels[idx])

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        scores = torch.cat([self.model(self.e_dense[i : i + 4096], self.e_cats[i : i + 4096])
                            for i in range(0, len(self.e_labels), 4096)])
        return roc_auc(scores.cpu(), self.e_labels.cpu())
