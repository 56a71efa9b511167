"""Unit tests of the mini RetinaNet's own parts: data, detection limits, COCO mAP (its box geometry:
test_detection.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from mlrepro.core.minis import load_module, mini_dir

ssd = load_module("ssd")


@pytest.fixture(scope="module")
def params() -> dict:
    return yaml.safe_load((mini_dir("ssd") / "defaults.yaml").read_text())


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
