"""Unit tests of the mini DLRM's own parts: the ROC AUC, the interaction, the generated click logs."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from mlrepro.core.minis import load_module, mini_dir

dlrm = load_module("dlrm")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def defaults() -> dict[str, Any]:
    return yaml.safe_load((mini_dir("dlrm") / "defaults.yaml").read_text())


def pairwise_auc(scores: list[float], labels: list[int]) -> float:
    """The definition: the share of (positive, negative) pairs ordered correctly, ties counting 1/2."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(5))
def test_auc_matches_the_pairwise_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=60)
    labels[:2] = [0, 1]
    scores = np.round(rng.normal(size=60) + labels, 1)  # rounded: many ties
    got = dlrm.roc_auc(torch.tensor(scores, dtype=torch.float32), torch.tensor(labels, dtype=torch.float32))
    assert got == pytest.approx(pairwise_auc(scores.astype(np.float32).tolist(), labels.tolist()), abs=1e-9)


def test_auc_extremes() -> None:
    y = torch.tensor([0.0, 0.0, 1.0, 1.0])
    assert dlrm.roc_auc(torch.tensor([0.1, 0.2, 0.3, 0.4]), y) == 1.0
    assert dlrm.roc_auc(torch.tensor([0.4, 0.3, 0.2, 0.1]), y) == 0.0
    assert dlrm.roc_auc(torch.zeros(4), y) == 0.5  # all tied


def test_interaction_is_the_lower_triangle_of_dot_products() -> None:
    torch.manual_seed(0)
    model = dlrm.DLRM(n_dense=3, n_cat=2, card=10, dim=4, bottom=[8], top=[8])
    assert model.top[0].in_features == 4 + 3  # bottom output + 3 pairs of 3 vectors
    dense, cats = torch.randn(5, 3), torch.randint(0, 10, (5, 2))
    seen: list[torch.Tensor] = []
    model.top.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    assert model(dense, cats).shape == (5,)
    x = model.bottom(dense)
    e0, e1 = model.embeddings[0](cats[:, 0]), model.embeddings[1](cats[:, 1])
    expected = torch.stack([(e0 * x).sum(1), (e1 * x).sum(1), (e1 * e0).sum(1)], dim=1)
    assert torch.allclose(seen[0][:, :4], x)
    assert torch.allclose(seen[0][:, 4:], expected, atol=1e-6)
    assert model.reference_names() == ["embeddings", "bottom_mlp_dense1", "bottom_mlp_dense2",
                                       "top_mlp_dense1", "top_mlp_dense2"]


def test_click_logs_shapes_frequencies_and_determinism(tmp_path: Path) -> None:
    p = defaults()
    d = p["data"]
    dlrm.generate_data(tmp_path, p, seed=3)
    train = np.load(tmp_path / "train.npz")
    assert train["dense"].shape == (d["train_samples"], d["dense_features"])
    assert train["cats"].shape == (d["train_samples"], d["categorical_features"])
    assert train["cats"].min() >= 0 and train["cats"].max() < d["cardinality"]
    ctr = train["labels"].mean()
    assert 0.15 < ctr < 0.5  # clicks rarer than non-clicks, as the negative offset intends
    # Zipf-like frequencies: in every feature value 0 is the commonest and rare values exist.
    counts = np.stack([np.bincount(c, minlength=d["cardinality"]) for c in train["cats"].T])
    assert (counts.argmax(1) == 0).all()
    assert (counts[:, 0] > 10 * counts[:, -1]).all()
    again = tmp_path / "again"
    again.mkdir()
    dlrm.generate_data(again, p, seed=3)
    for name in ("train.npz", "eval.npz"):
        a, b = np.load(tmp_path / name), np.load(again / name)
        assert all(np.array_equal(a[k], b[k]) for k in ("dense", "cats", "labels"))
