"""Unit tests of the mini DLRM-DCNv2's defining parts: the low-rank cross layers' shapes and formula, the
multi-hot embedding bags, and the generated multi-hot click logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from mlrepro.core.minis import load_module, mini_dir

dcn = load_module("dlrm_dcnv2")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def defaults() -> dict[str, Any]:
    return yaml.safe_load((mini_dir("dlrm_dcnv2") / "defaults.yaml").read_text())


def test_a_cross_layer_has_the_low_rank_shapes_and_formula() -> None:
    torch.manual_seed(0)
    layer = dcn.CrossLayer(width=12, rank=3)
    assert layer.V.weight.shape == (3, 12) and layer.V.bias is None
    assert layer.U.weight.shape == (12, 3) and layer.U.bias.shape == (12,)
    x0, x = torch.randn(5, 12), torch.randn(5, 12)
    out = layer(x0, x)
    assert out.shape == (5, 12)
    w = layer.U.weight @ layer.V.weight  # the full-rank matrix the layer factors: (width, width), rank 3
    assert torch.linalg.matrix_rank(w) == 3
    assert torch.allclose(out, x0 * (x @ w.T + layer.U.bias) + x, atol=1e-5)


def test_the_model_crosses_the_concatenated_vectors() -> None:
    p, d = defaults(), defaults()["data"]
    torch.manual_seed(0)
    model = dcn.DLRMDCNv2(d["dense_features"], d["multi_hot_sizes"], d["cardinality"], p["embedding_dim"],
                          p["bottom_mlp"], p["top_mlp"], p["cross_layers"], p["cross_rank"])
    width = p["embedding_dim"] * (len(d["multi_hot_sizes"]) + 1)
    assert len(model.cross) == p["cross_layers"]
    assert all(layer.V.weight.shape == (p["cross_rank"], width) for layer in model.cross)
    assert model.top[0].in_features == width
    dense = torch.randn(4, d["dense_features"])
    cats = torch.randint(0, d["cardinality"], (4, sum(d["multi_hot_sizes"])))
    assert model(dense, cats).shape == (4,)
    assert model.reference_names()[:1] == ["embeddings"]
    assert sum(n.startswith("interaction_cross_layer") for n in model.reference_names()) == p["cross_layers"]


def test_a_multi_hot_bag_is_the_sum_of_its_values_embeddings() -> None:
    torch.manual_seed(0)
    model = dcn.DLRMDCNv2(2, [3, 1], 10, 4, [], [], 1, 2)
    cats = torch.tensor([[1, 2, 2, 7]])
    bag = model.embeddings[0](cats[:, :3])
    assert torch.allclose(bag, model.embeddings[0].weight[[1, 2, 2]].sum(0, keepdim=True))


def test_generated_click_logs_are_multi_hot(tmp_path: Path) -> None:
    d = {**defaults()["data"], "train_samples": 500, "eval_samples": 200}
    dcn.generate_data(tmp_path, {"data": d}, 7)
    train = np.load(tmp_path / "train.npz")
    assert train["cats"].shape == (500, sum(d["multi_hot_sizes"])) and train["dense"].shape == (500, 4)
    assert train["cats"].min() >= 0 and train["cats"].max() < d["cardinality"]
    assert 0.05 < train["labels"].mean() < 0.5  # clicks rarer than non-clicks
    with pytest.raises(ValueError, match="multi_hot_sizes"):
        dcn.generate_data(tmp_path, {"data": {**d, "multi_hot_sizes": [1, 2]}}, 7)
