"""Unit tests of the mini Mask R-CNN's own parts: sampling, mask targets and pasting, COCO box and mask AP,
the MLPerf tensor names (its box geometry and RoI Align: test_detection.py)."""

from __future__ import annotations

from pathlib import Path

import mlperf_logging
import numpy as np
import pytest
import torch
import yaml

from mlrepro.core.minis import load_module, mini_dir
from mlrepro.training.detection import roi_align

mrcnn = load_module("maskrcnn")


@pytest.fixture(scope="module")
def params() -> dict:
    return yaml.safe_load((mini_dir("maskrcnn") / "defaults.yaml").read_text())


def test_sample_is_balanced() -> None:
    gen = torch.Generator().manual_seed(0)
    positive = torch.zeros(3, 100, dtype=torch.bool)
    positive[0, :50] = True
    positive[1, :2] = True
    negative = ~positive
    negative[2, 90:] = False
    pos, neg = mrcnn.sample(positive, negative, 16, 0.25, gen)
    assert pos.sum(1).tolist() == [4, 2, 0]  # at most a quarter positive
    assert neg.sum(1).tolist() == [12, 14, 16]  # negatives fill the rest
    assert not (pos & ~positive).any() and not (neg & ~negative).any()
    assert len({tuple(mrcnn.sample(positive, negative, 16, 0.25, gen)[1][0].nonzero().flatten().tolist())
                for _ in range(3)}) > 1  # random, not the first ones


def test_paste_masks() -> None:
    masks = torch.ones(2, 10, 10)
    masks[1, :, 5:] = 0  # left half only
    boxes = torch.tensor([[4.0, 4, 12, 12], [0, 0, 8, 4]])
    pasted = mrcnn.paste_masks(masks, boxes, 16)
    expected = torch.zeros(2, 16, 16, dtype=torch.bool)
    expected[0, 4:12, 4:12] = True
    expected[1, 0:4, 0:4] = True
    assert torch.equal(pasted, expected)


def test_coco_ap_perfect_and_shifted() -> None:
    masks = np.zeros((2, 2, 32, 32), dtype=bool)
    masks[0, 0, 2:10, 2:12] = True
    masks[0, 1, 16:30, 16:28] = True
    masks[1, 0, 5:15, 5:15] = True
    masks[1, 0, 5:8, 5:8] = False  # not a rectangle: its box and mask IoUs differ
    boxes = np.array([[[2, 2, 12, 10], [16, 16, 28, 30]], [[5, 5, 15, 15], [0, 0, 0, 0]]], np.float32)
    labels = np.array([[1, 3], [2, 0]])
    gt = mrcnn.coco_ground_truth(masks, boxes, labels)

    def dets(shift: int) -> list[dict]:
        out = []
        for i in range(2):
            keep = labels[i] > 0
            b = torch.from_numpy(boxes[i][keep]) + shift
            m = torch.from_numpy(np.roll(masks[i][keep], (shift, shift), axis=(1, 2)))
            out += mrcnn.to_coco(i, b, torch.ones(len(b)), torch.from_numpy(labels[i][keep]), m)
        return out

    assert mrcnn.coco_ap(gt, dets(0)) == pytest.approx({"BBOX": 1.0, "SEGM": 1.0})
    shifted = mrcnn.coco_ap(gt, dets(2))
    assert shifted["BBOX"] < 0.9 and shifted["SEGM"] < 0.9
    assert mrcnn.coco_ap(gt, []) == {"BBOX": 0.0, "SEGM": 0.0}


def test_initialized_tensors_are_the_closed_list(params: dict, tmp_path: Path) -> None:
    rules = Path(mlperf_logging.__file__).parent / "compliance_checker/training_2.0.0/closed_maskrcnn.yaml"
    end = next(block["END"] for block in yaml.safe_load(rules.read_text()) if "END" in block)
    expected = [name.strip().strip('"') for name in end["CHECK"].split("sorted([")[1].split("]")[0].split(",")]
    model = mrcnn.MaskRCNN(params)
    assert sorted(mrcnn.MLPERF_TENSORS) == sorted(n for n in expected if n)
    for layer in mrcnn.MLPERF_TENSORS.values():
        assert model.get_submodule(layer).weight.requires_grad


def test_generate_data_masks_match_boxes(tmp_path: Path, params: dict) -> None:
    params = {**params, "data": {**params["data"], "train_samples": 32, "eval_samples": 4}}
    for name, seed in (("a", 1), ("b", 1)):
        (tmp_path / name).mkdir()
        mrcnn.generate_data(tmp_path / name, params, seed)
    assert (tmp_path / "a/train.npz").read_bytes() == (tmp_path / "b/train.npz").read_bytes()
    data = np.load(tmp_path / "a/train.npz")
    for masks, boxes, labels in zip(data["masks"], data["boxes"], data["labels"], strict=True):
        assert labels[0] > 0
        for m, b, lab in zip(masks, boxes, labels, strict=True):
            if lab == 0:
                assert not m.any()
                continue
            ys, xs = np.nonzero(m)
            assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == tuple(b)


def test_mask_targets_of_a_rectangle_are_full() -> None:
    """A proposal equal to a rectangle's box crops its mask to all ones (the mask head's target)."""
    mask = torch.zeros(1, 1, 32, 32)
    mask[0, 0, 4:12, 6:20] = 1
    target = roi_align(mask, torch.tensor([[0.0, 6, 4, 20, 12]]), 10) >= 0.5
    assert target.all()
    wider = roi_align(mask, torch.tensor([[0.0, 0, 4, 26, 12]]), 10) >= 0.5
    assert not wider.all() and wider.any()
