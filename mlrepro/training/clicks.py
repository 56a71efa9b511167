"""What the two recommendation minis share (minis/dlrm, minis/dlrm_dcnv2): generated click logs
from a hidden model of DLRM's own form, the exact ROC AUC, the MLP of their towers, and the workload's
data, steps and evaluation (each mini adds its model, optimizer and logged hyperparameters).

The click logs: every category value has a hidden vector, the dense features are projected to one more,
and a click's probability is the sigmoid of the vectors' pairwise dot products plus an offset that makes
clicks rarer than non-clicks, as in Criteo. A multi-hot feature (Criteo multi-hot, dlrm_dcnv2) draws
several values per row and contributes the sum of their vectors over the root of their count. Labels
are drawn from that probability, so even the hidden model is far from an AUC of 1.
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
def _pairwise_logits(vecs: np.ndarray, offset: float) -> np.ndarray:
    """The sum of the distinct pairwise dot products of each row's (F, k) vectors, plus ``offset``."""
    dots = vecs @ vecs.transpose(0, 2, 1)
    iu = np.triu_indices(vecs.shape[1], k=1)
    return dots[:, iu[0], iu[1]].sum(1) + offset


def write_click_logs(out_dir: Path, d: dict[str, Any], seed: int, hotness: list[int] | None = None) -> None:
    """``train.npz`` and ``eval.npz`` (dense float32, cats int16, labels float32) from the hidden model.

    ``hotness`` None: one value per categorical feature (cats of shape (n, features)); else the values each
    feature draws per row, their columns side by side (cats of shape (n, sum(hotness)))."""
    rng = np.random.default_rng(seed)
    k, n_dense, n_cat, card = d["hidden_dim"], d["dense_features"], d["categorical_features"], d["cardinality"]
    # Scaled so that the sum of the F(F-1)/2 dot products has a standard deviation of about ``signal``.
    pairs = (n_cat + 1) * n_cat / 2
    scale = (d["signal"] ** 2 / (pairs * k)) ** 0.25
    proj = rng.normal(0, scale / math.sqrt(n_dense), size=(n_dense, k))
    tables = [rng.normal(0, scale, size=(card, k)) for _ in range(n_cat)]
    # Zipf-like category frequencies, as in Criteo: a few values are common, most are rare.
    freq = 1.0 / np.arange(1, card + 1)
    for split, n in (("train", d["train_samples"]), ("eval", d["eval_samples"])):
        dense = rng.normal(size=(n, n_dense)).astype(np.float32)
        if hotness is None:
            cats = np.stack([rng.choice(card, size=n, p=freq / freq.sum()) for _ in range(n_cat)], axis=1)
            feature_vecs = [t[cats[:, i]] for i, t in enumerate(tables)]
        else:
            bags = [rng.choice(card, size=(n, h), p=freq / freq.sum()) for h in hotness]
            cats = np.concatenate(bags, axis=1)
            # A multi-hot feature's hidden vector: the mean of its values' vectors, scaled back to unit spread.
            feature_vecs = [t[b].sum(1) / math.sqrt(b.shape[1]) for t, b in zip(tables, bags, strict=True)]
        vecs = np.stack([dense @ proj, *feature_vecs], axis=1)  # (n, F, k)
        p = 1 / (1 + np.exp(-_pairwise_logits(vecs, d["offset"])))
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


def linear_names(prefix: str, tower: nn.Sequential) -> list[str]:
    """The closed rules' names of a tower's layers: ``<prefix>1``, ``<prefix>2``, ..."""
    return [f"{prefix}{i + 1}" for i in range(sum(isinstance(m, nn.Linear) for m in tower))]


# ------------------------------------------------------------------------------------ workload
class ClickWorkload:
    """The click logs on ``device``, training in shuffled index batches, BCE on logits, ROC AUC on eval.

    A subclass sets ``model`` (``model(dense, cats)`` gives logits; ``model.reference_names()`` the logged
    tensors), ``optimizer``, ``scheduler``, ``batch`` and ``hyperparameters``."""

    higher_is_better = True
    grad_clip_norm = None
    data_parallel = True  # batches are index tensors: mlrepro.train shards them across processes
    model: nn.Module
    batch: int

    def __init__(self, data_dir: Path, device: torch.device, seed: int) -> None:
        self.device, self.seed = device, seed

        def load(name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            split = np.load(data_dir / name)
            return (torch.from_numpy(split["dense"]).to(device),
                    torch.from_numpy(split["cats"].astype(np.int64)).to(device),
                    torch.from_numpy(split["labels"]).to(device))

        self.dense, self.cats, self.labels = load("train.npz")
        self.e_dense, self.e_cats, self.e_labels = load("eval.npz")
        self.train_samples = len(self.labels)
        self.eval_samples = len(self.e_labels)

    def initialized_tensors(self) -> list[str]:
        return self.model.reference_names()  # type: ignore[operator]

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
