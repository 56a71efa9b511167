"""Unit tests of the mini 3D U-Net's own parts: Dice, the Dice + CE loss, the network's shape, the data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from mlrepro.core.minis import load_module, mini_dir

unet3d = load_module("unet3d")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def defaults() -> dict[str, Any]:
    return yaml.safe_load((mini_dir("unet3d") / "defaults.yaml").read_text())


def test_dice_of_known_masks() -> None:
    labels = torch.zeros(1, 4, 4, 4, dtype=torch.long)
    labels[0, :2] = 1  # 32 kidney voxels
    labels[0, 0, 0, :2] = 2  # 2 of them are tumour
    pred = labels.clone()
    pred[0, 2, 0, 0] = 1  # one extra kidney voxel
    pred[0, 0, 0, 1] = 1  # one tumour voxel called kidney
    dice = unet3d.dice_per_class(unet3d.one_hot(pred), unet3d.one_hot(labels))[0]
    # Kidney: 30 true voxels, predicted 30 + 2, all 30 found; tumour: 2 true, 1 predicted and right.
    kidney_truth, kidney_pred, kidney_both = 30, 32, 30
    assert dice[1].item() == pytest.approx(2 * kidney_both / (kidney_truth + kidney_pred), abs=1e-6)
    assert dice[2].item() == pytest.approx(2 * 1 / (2 + 1), abs=1e-6)
    assert dice[0].item() == pytest.approx(2 * 31 / (32 + 31), abs=1e-6)


def test_dice_of_an_empty_class_predicted_empty_is_one() -> None:
    labels = torch.zeros(1, 3, 3, 3, dtype=torch.long)
    dice = unet3d.dice_per_class(unet3d.one_hot(labels), unet3d.one_hot(labels))[0]
    assert dice.tolist() == pytest.approx([1.0, 1.0, 1.0])
    wrong = labels.clone()
    wrong[0, 0, 0, 0] = 2
    assert unet3d.dice_per_class(unet3d.one_hot(wrong), unet3d.one_hot(labels))[0, 2].item() < 1e-5


def test_dice_ce_loss_is_small_for_confident_right_answers_and_large_for_wrong_ones() -> None:
    torch.manual_seed(0)
    labels = torch.randint(0, 3, (2, 4, 4, 4))
    right = 20.0 * unet3d.one_hot(labels)
    wrong = 20.0 * unet3d.one_hot((labels + 1) % 3)
    assert unet3d.dice_ce_loss(right, labels).item() < 1e-3
    assert unet3d.dice_ce_loss(wrong, labels).item() > 5.0


def test_unet_keeps_the_resolution_and_names_layers_like_the_rules() -> None:
    model = unet3d.UNet3D([2, 4, 8])
    x = torch.randn(2, 1, 8, 8, 8)
    assert model(x).shape == (2, 3, 8, 8, 8)
    names = model.layer_names()
    assert names[:4] == [
        "input_block_0_conv", "input_block_0_instancenorm", "input_block_1_conv", "input_block_1_instancenorm"
    ]
    for expected in ("down0_block_0_conv", "down1_block_1_instancenorm", "up0_deconv", "up1_block_1_conv"):
        assert expected in names
    assert names[-1] == "output_conv"
    assert not any(n.startswith(("down2", "up2")) for n in names)  # two levels, no more
    assert len(names) == len(set(names))


def test_generated_volumes_are_deterministic_with_tumour_inside_kidney(tmp_path: Path) -> None:
    params = defaults()
    params["data"].update(train_samples=6, eval_samples=2)
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        unet3d.generate_data(tmp_path / sub, params, seed=5)
    a, b = np.load(tmp_path / "a" / "train.npz"), np.load(tmp_path / "b" / "train.npz")
    np.testing.assert_array_equal(a["images"], b["images"])
    np.testing.assert_array_equal(a["labels"], b["labels"])
    s = params["data"]["size"]
    assert a["images"].shape == (6, 1, s, s, s) and a["labels"].shape == (6, s, s, s)
    for image, label in zip(a["images"], a["labels"], strict=True):
        assert (label == 1).any() and (label == 2).any()
        # The tumour is brighter than the kidney on average, the kidney than the background.
        means = [image[0][label == k].mean() for k in range(3)]
        assert means[0] < means[1] < means[2]


def test_workload_logs_the_rules_layer_names(tmp_path: Path) -> None:
    params = defaults()
    params["data"].update(train_samples=2, eval_samples=2)
    unet3d.generate_data(tmp_path, params, seed=0)
    w = unet3d.Workload(tmp_path, params, torch.device("cpu"), seed=0)
    names = w.initialized_tensors()
    assert "input_block_0_conv" in names and "output_conv" in names
    assert 0.0 <= w.evaluate(0) <= 1.0
