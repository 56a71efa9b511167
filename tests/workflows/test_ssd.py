"""Unit tests of the mini RetinaNet's own parts: boxes, anchors, matching, focal loss, NMS, COCO mAP."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from mlrepro.workload import load_module, workflow_dir

ssd = load_module("ssd")


@pytest.fixture(scope="module")
def params() -> dict:
    return yaml.safe_load((workflow_dir("ssd") / "defaults.yaml").read_text())


def test_box_iou_hand_computed() -> None:
    a = torch.tensor([[0.0, 0, 2, 2]])
    b = torch.tensor([[1.0, 1, 3, 3], [0, 0, 2, 2], [5, 5, 6, 6], [0, 0, 4, 2]])
    assert torch.allclose(ssd.box_iou(a, b), torch.tensor([[1 / 7, 1.0, 0.0, 0.5]]))


def test_encode_decode() -> None:
    anchor = torch.tensor([[0.0, 0, 4, 4]])
    gt = torch.tensor([[2.0, 0, 6, 8]])  # centre moved by half a width, twice as tall
    deltas = ssd.encode(anchor, gt)
    assert torch.allclose(deltas, torch.tensor([[0.5, 0.5, 0.0, math.log(2)]]))
    assert torch.allclose(ssd.decode(anchor, deltas), gt)


def test_nms_and_batched_nms() -> None:
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30], [0, 1, 10, 11]])
    scores = torch.tensor([0.5, 0.9, 0.8, 0.3])
    assert ssd.nms(boxes, scores, 0.5).tolist() == [1, 2]  # box 1 suppresses 0 and 3
    assert ssd.nms(boxes, scores, 0.95).tolist() == [1, 2, 0, 3]
    classes = torch.tensor([0, 1, 0, 0])  # box 1 is another class: it suppresses nothing
    assert ssd.batched_nms(boxes, scores, classes, 0.5).tolist() == [1, 2, 0]


def test_anchors_order_and_shape() -> None:
    anchors = ssd.make_anchors(16, [4, 8], [[4.0], [8.0]], [0.5, 1.0, 2.0])
    assert anchors.shape == (4 * 4 * 3 + 2 * 2 * 3, 4)
    # level 0, cell (y=0, x=0): centre (2, 2); ratio h/w = 0.5 with area 16
    w, h = 4 / math.sqrt(0.5), 4 * math.sqrt(0.5)
    assert torch.allclose(anchors[0], torch.tensor([2 - w / 2, 2 - h / 2, 2 + w / 2, 2 + h / 2]))
    assert torch.allclose(anchors[1], torch.tensor([0.0, 0, 4, 4]))
    assert torch.allclose(anchors[4], torch.tensor([4.0, 0, 8, 4]))  # next cell along x, square
    assert torch.allclose(anchors[4 * 4 * 3 + 1], torch.tensor([0.0, 0, 8, 8]))  # first cell of level 1


def test_match_thresholds_and_low_quality() -> None:
    anchors = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 6], [0, 0, 10, 4.5], [50, 50, 60, 60], [30, 30, 31, 31]])
    gt = torch.tensor([[[0.0, 0, 10, 10], [30, 30, 33, 33], [0, 0, 0, 0]]])
    valid = torch.tensor([[True, True, False]])
    m = ssd.match(anchors, gt, valid, 0.5, 0.4)[0].tolist()
    # IoU 1 -> object 0; 0.6 -> object 0; 0.45 -> ignored; 0 -> background;
    # the last anchor has IoU 1/9 with object 1, but it is that object's best anchor, so it is kept.
    assert m == [0, 0, ssd.IGNORE, ssd.BACKGROUND, 1]


def test_focal_loss() -> None:
    logits = torch.tensor([3.0, -3.0, 0.0])
    targets = torch.tensor([1.0, 0.0, 1.0])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction="sum")
    assert torch.isclose(ssd.sigmoid_focal_loss(logits, targets, 0.5, 0.0), 0.5 * bce)
    # gamma > 0 shrinks the loss of the two easy examples far more than that of the hard one
    easy = ssd.sigmoid_focal_loss(logits[:2], targets[:2], 0.5, 2.0)
    hard = ssd.sigmoid_focal_loss(logits[2:], targets[2:], 0.5, 2.0)
    assert easy < 0.01 * ssd.sigmoid_focal_loss(logits[:2], targets[:2], 0.5, 0.0)
    assert hard > 0.2 * ssd.sigmoid_focal_loss(logits[2:], targets[2:], 0.5, 0.0)


def test_coco_map_perfect_and_shifted() -> None:
    boxes = np.array([[[2, 2, 12, 10], [16, 16, 28, 30]], [[5, 5, 15, 15], [0, 0, 0, 0]]], np.float32)
    labels = np.array([[1, 3], [2, 0]])
    gt = ssd.coco_ground_truth(boxes, labels, 32)

    def dets(shift: float) -> list[dict]:
        out = []
        for i in range(2):
            keep = labels[i] > 0
            b = torch.from_numpy(boxes[i][keep]) + shift
            out += ssd.to_coco(i, b, torch.ones(len(b)), torch.from_numpy(labels[i][keep]))
        return out

    assert ssd.coco_map(gt, dets(0.0)) == pytest.approx(1.0)
    assert ssd.coco_map(gt, dets(2.0)) < 0.9
    assert ssd.coco_map(gt, []) == 0.0


def test_generate_data_is_deterministic_and_small(tmp_path: Path, params: dict) -> None:
    full = params["data"]["train_samples"] + params["data"]["eval_samples"]
    params = {**params, "data": {**params["data"], "train_samples": 64, "eval_samples": 8}}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        (tmp_path / name).mkdir()
        ssd.generate_data(tmp_path / name, params, seed)
    a, b, c = ((tmp_path / n / "train.npz").read_bytes() for n in "abc")
    assert a == b and a != c
    assert sum(p.stat().st_size for p in (tmp_path / "a").iterdir()) * full / 72 < 20e6
    data = np.load(tmp_path / "a" / "train.npz")
    boxes, labels = data["boxes"], data["labels"]
    assert (labels > 0).any(axis=1).all()  # every image has an object
    real = boxes[labels > 0]
    sizes = real[:, 2:] - real[:, :2]
    assert (real >= 0).all() and (real <= params["data"]["image_size"]).all()
    assert (sizes >= 1).all() and (sizes <= params["data"]["max_size"]).all()


def test_detect_respects_limits(params: dict) -> None:
    torch.manual_seed(0)
    params = {**params, "score_threshold": 0.0}  # an untrained model's scores are all near the prior
    model = ssd.RetinaNet(params).eval()
    for boxes, scores, cats in model.detect(torch.rand(2, 3, 32, 32) - 0.5):
        assert len(boxes) == params["detections_per_image"]
        assert (boxes >= 0).all() and (boxes <= 32).all()
        assert (scores[:-1] >= scores[1:]).all()  # best first
        assert ((cats >= 1) & (cats <= len(ssd.SHAPES))).all()
