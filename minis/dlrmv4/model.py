"""Mini DLRMv4 (HSTU): generative recommendation over jagged user histories, trained to a ROC AUC target.

The real benchmark (MLPerf Training v6.1) trains a Hierarchical Sequential Transduction Unit (HSTU, Zhai et al.
2024) on user histories of up to 4096 events: each user's sequence of items and actions is jagged (as long as
it is), the candidate item joins the end of the sequence (target-aware), and HSTU layers replace softmax
attention by a pointwise one, ``A = SiLU(Q K^T + rab) / n`` with a relative attention bias, gated by ``U`` and
normalised; the item embedding table trains with a sparse RowWise Adagrad (one accumulator per row, only the rows
a batch touches), everything else with Adam; a linear warm-up from 0; the ROC AUC of the click predictions on
held-out users, evaluated every 0.1% of the data, until it reaches 0.75. This mini keeps that form:

- the data: users of a hidden model (a preference vector each; items have vectors too), each with a history of
  4 to ``max_history`` events (the item, and whether the user clicked it), stored jagged (values and offsets),
  and a candidate item with its click label, drawn from the same model: the model must read the history to
  score the candidate; the Bayes AUC (from the hidden probabilities) is in ``source.json``;
- the model: item, action and position embeddings; HSTU layers (``U, V, Q, K = split(SiLU(f1(LayerNorm(x))))``,
  ``A = SiLU(Q K^T + rab) / n`` causal and masked to each user's own length ``n``, ``x + f2(LayerNorm(A V) * U)``);
  the candidate's output through an MLP gives the click logit; binary cross-entropy;
- the optimizers: RowWise Adagrad on the item table, Adam (betas 0.95 / 0.999, epsilon 1e-8, no weight decay) on
  the rest, both warmed up linearly from 0 in lockstep; gradients clipped at 1.0, as the closed rules.

Left out: the scale (billions of events, tables of millions of rows, sequences of 4096), multi-task heads,
the ranking and retrieval split, BF16 and the fused jagged kernels (here a batch is padded to its longest user
and masked: the same arithmetic).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlrepro.training.clicks import roc_auc
from mlrepro.training.epoch_order import epoch_generator
from mlrepro.training.schedules import FunctionLR

SOURCE_FILE = "source.json"
UNKNOWN = 2  # the candidate's action: not yet taken (0: seen, 1: clicked)


# ---------------------------------------------------------------------------------------- data
def _users(rng: np.random.Generator, items: np.ndarray, n: int, d: dict[str, Any]) -> dict[str, np.ndarray]:
    """``n`` users' jagged histories, candidates, labels and the labels' hidden probabilities."""
    prefs = rng.normal(size=(n, items.shape[1]))
    lengths = rng.integers(4, d["max_history"] + 1, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    affinity = prefs @ items.T  # (n, items)
    seen = np.exp(d["browse_sharpness"] * affinity)
    seen /= seen.sum(axis=1, keepdims=True)
    values, actions = [], []
    for u in range(n):
        history = rng.choice(len(items), size=lengths[u], p=seen[u])
        values.append(history)
        actions.append(rng.random(lengths[u]) < _click(affinity[u, history], d))
    candidates = rng.integers(len(items), size=n)
    p = _click(affinity[np.arange(n), candidates], d)
    return {"items": np.concatenate(values).astype(np.int16), "actions": np.concatenate(actions).astype(np.int8),
            "offsets": offsets.astype(np.int64), "candidates": candidates.astype(np.int16),
            "labels": (rng.random(n) < p).astype(np.float32), "p": p}


def _click(affinity: np.ndarray, d: dict[str, Any]) -> np.ndarray:
    return 1 / (1 + np.exp(-(d["click_scale"] * affinity + d["click_offset"])))


def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    d = params["data"]
    rng = np.random.default_rng(seed)
    items = rng.normal(size=(d["items"], d["latent_dim"])) / math.sqrt(d["latent_dim"])
    floors = {}
    for split in ("train", "eval"):
        users = _users(rng, items, d[f"{split}_samples"], d)
        floors[f"{split}_bayes_auc"] = roc_auc(torch.from_numpy(users.pop("p")), torch.from_numpy(users["labels"]))
        np.savez(out_dir / f"{split}.npz", **users)
    (out_dir / SOURCE_FILE).write_text(json.dumps(floors, indent=1, sort_keys=True) + "\n")


# --------------------------------------------------------------------------------------- model
class HSTULayer(nn.Module):
    """One HSTU layer: pointwise aggregated attention with a relative attention bias, gated by U."""

    def __init__(self, dim: int, heads: int, max_length: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm = nn.LayerNorm(dim)
        self.f1 = nn.Linear(dim, 4 * dim)  # U, V, Q, K
        self.rab = nn.Parameter(torch.zeros(heads, max_length))  # bias by relative distance i - j
        self.out_norm = nn.LayerNorm(dim)
        self.f2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        u, v, q, k = F.silu(self.f1(self.norm(x))).split(d, dim=-1)

        def heads(z: torch.Tensor) -> torch.Tensor:
            return z.view(b, t, self.heads, self.head_dim).transpose(1, 2)

        pos = torch.arange(t, device=x.device)
        distance = (pos[:, None] - pos[None, :]).clamp(min=0)
        scores = heads(q) @ heads(k).transpose(-1, -2) + self.rab[:, distance]  # (b, h, t, t)
        valid = (pos[None, :] < lengths[:, None])  # (b, t): each user's own positions
        mask = (pos[:, None] >= pos[None, :]) & valid[:, None, :]  # causal, within the user's length
        a = F.silu(scores) * mask[:, None] / lengths.view(b, 1, 1, 1).to(x.dtype)  # pointwise, over n
        y = (a @ heads(v)).transpose(1, 2).reshape(b, t, d)
        return x + self.f2(self.out_norm(y) * u)


class HSTU(nn.Module):
    def __init__(self, items: int, dim: int, heads: int, layers: int, max_length: int, mlp: int) -> None:
        super().__init__()
        self.item_embedding = nn.Embedding(items, dim)  # the sparse table (RowWise Adagrad)
        self.action_embedding = nn.Embedding(3, dim)
        self.position_embedding = nn.Embedding(max_length, dim)
        self.layers = nn.ModuleList(HSTULayer(dim, heads, max_length) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Sequential(nn.Linear(dim, mlp), nn.SiLU(), nn.Linear(mlp, 1))
        nn.init.normal_(self.item_embedding.weight, std=1.0)

    def forward(self, items: torch.Tensor, actions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Padded (b, t) histories with their candidate at position ``lengths - 1`` -> click logits (b,)."""
        pos = torch.arange(items.shape[1], device=items.device)
        x = self.item_embedding(items) + self.action_embedding(actions) + self.position_embedding(pos)
        for layer in self.layers:
            x = layer(x, lengths)
        last = self.norm(x[torch.arange(len(lengths)), lengths - 1])
        return self.head(last).squeeze(-1)


# ---------------------------------------------------------------------------------- optimizers
class RowWiseAdagrad(torch.optim.Optimizer):
    """Adagrad with one accumulator per embedding row (the mean of the row's squared gradient), updating only the
    rows the batch touched, as torchrec's fused ``EXACT_ROWWISE_ADAGRAD``."""

    def __init__(self, params: list[nn.Parameter], lr: float, eps: float) -> None:
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for w in group["params"]:
                if w.grad is None:
                    continue
                g = w.grad
                state = self.state[w]
                if "sum" not in state:
                    state["sum"] = torch.zeros(w.shape[0], dtype=w.dtype, device=w.device)
                rows = (g != 0).any(dim=1).nonzero().squeeze(1)
                state["sum"][rows] += g[rows].pow(2).mean(dim=1)
                w[rows] -= group["lr"] * g[rows] / (state["sum"][rows].sqrt() + group["eps"]).unsqueeze(1)


class Both:
    """The dense and the sparse optimizer (or their schedulers) stepped as one, as the reference steps them."""

    def __init__(self, *parts: Any) -> None:
        self.parts = parts

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parts:
            p.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for p in self.parts:
            p.step()


# ------------------------------------------------------------------------------------ workload
class Workload:
    higher_is_better = True

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        self.device, self.seed = device, seed
        d = params["data"]
        self.train, self.eval = (self._load(np.load(data_dir / f"{s}.npz"), device) for s in ("train", "eval"))
        self.train_samples, self.eval_samples = len(self.train["labels"]), len(self.eval["labels"])
        self.max_length = d["max_history"] + 1  # the history and the candidate
        self.model = HSTU(d["items"], params["dim"], params["heads"], params["layers"], self.max_length,
                          params["mlp"]).to(device)
        self.batch = params["batch_size"]
        # an "epoch" of the loop is eval_every_data_pct of the data: one evaluation after each
        self.steps_per_eval = max(1, math.ceil(params["eval_every_data_pct"] * self.train_samples / self.batch))
        table = [self.model.item_embedding.weight]
        dense = [p for n, p in self.model.named_parameters() if n != "item_embedding.weight"]
        lr, warmup = params["lr"], params["warmup_steps"]
        adam = torch.optim.Adam(dense, lr=lr, betas=(0.95, 0.999), eps=1e-8, weight_decay=0.0)
        sparse = RowWiseAdagrad(table, lr=params["sparse_lr"], eps=1e-8)
        self.optimizer = Both(adam, sparse)

        def ramp(base: float) -> Any:
            return lambda step: base * min(1.0, (step + 1) / warmup)  # linear from 0, then constant

        self.scheduler = Both(FunctionLR(adam, ramp(lr)), FunctionLR(sparse, ramp(params["sparse_lr"])))
        self.grad_clip_norm = 1.0
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "max_sequence_length": self.max_length,
            "opt_name": "Adam",
            "opt_base_learning_rate": lr,
            "opt_adam_beta_1": 0.95,
            "opt_adam_beta_2": 0.999,
            "opt_adam_epsilon": 1e-8,
            "opt_weight_decay": 0.0,
            "opt_gradient_clip_norm": self.grad_clip_norm,
            "opt_sparse_name": "RowWiseAdagrad",
            "opt_sparse_base_learning_rate": params["sparse_lr"],
            "opt_learning_rate_warmup_steps": warmup,
            "opt_learning_rate_warmup_start_lr": 0.0,
            "eval_every_data_pct": params["eval_every_data_pct"],
        }

    @staticmethod
    def _load(split: Any, device: torch.device) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(split[k].astype(np.int64 if k != "labels" else np.float32)).to(device)
                for k in ("items", "actions", "offsets", "candidates", "labels")}

    def initialized_tensors(self) -> list[str]:
        return [n for n, _ in self.model.named_parameters()]

    def samples_count(self, epoch: int) -> int:
        return epoch * self.steps_per_eval * self.batch

    def _padded(self, split: dict[str, torch.Tensor], users: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The users' jagged histories, each followed by its candidate, right-padded to the longest: items,
        actions, lengths (history + 1), labels."""
        starts, ends = split["offsets"][users], split["offsets"][users + 1]
        lengths = ends - starts + 1
        t = int(lengths.max())
        pos = torch.arange(t, device=users.device)
        index = (starts[:, None] + pos[None, :]).clamp(max=len(split["items"]) - 1)
        history = pos[None, :] < (lengths - 1)[:, None]
        items = torch.where(history, split["items"][index], 0)
        actions = torch.where(history, split["actions"][index], UNKNOWN)
        at_candidate = pos[None, :] == (lengths - 1)[:, None]
        items = torch.where(at_candidate, split["candidates"][users][:, None], items)
        return items, actions, lengths, split["labels"][users]

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        gen = epoch_generator(self.seed, epoch)
        n = self.train_samples
        for _ in range(self.steps_per_eval):
            yield torch.randint(n, (self.batch,), generator=gen).to(self.device)

    def loss(self, users: torch.Tensor) -> torch.Tensor:
        items, actions, lengths, labels = self._padded(self.train, users)
        return F.binary_cross_entropy_with_logits(self.model(items, actions, lengths), labels)

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        users = torch.arange(self.eval_samples, device=self.device)
        scores = torch.cat([self.model(*self._padded(self.eval, chunk)[:3]) for chunk in users.split(1024)])
        return roc_auc(scores.cpu(), self.eval["labels"].cpu())
