"""Unit tests of the mini Mask R-CNN's own parts: RoI Align, level assignment, sampling, matching,
mask pasting, COCO box and mask AP, the MLPerf tensor names."""

from __future__ import annotations

import math
from pathlib import Path

import mlperf_logging
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from mlrepro.workload import load_module, workflow_dir

mrcnn = load_module("maskrcnn")


@pytest.fixture(scope="module")
def params() -> dict:
    return yaml.safe_load((workflow_dir("maskrcnn") / "defaults.yaml").read_text())


def test_box_iou_and_codec() -> None:
    a = torch.tensor([[0.0, 0, 2, 2]])
    b = torch.tensor([[1.0, 1, 3, 3], [0, 0, 2, 2], [5, 5, 6, 6]])
    assert torch.allclose(mrcnn.box_iou(a, b), torch.tensor([[1 / 7, 1.0, 0.0]]))
    ref, gt = torch.tensor([[0.0, 0, 4, 4]]), torch.tensor([[2.0, 0, 6, 8]])
    assert torch.allclose(mrcnn.encode(ref, gt), torch.tensor([[0.5, 0.5, 0.0, math.log(2)]]))
    assert torch.allclose(mrcnn.decode(ref, mrcnn.encode(ref, gt)), gt)


def test_nms() -> None:
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30]])
    scores = torch.tensor([0.5, 0.9, 0.8])
    assert mrcnn.nms(boxes, scores, 0.5).tolist() == [1, 2]
    assert mrcnn.nms(boxes, scores, 0.5, max_keep=1).tolist() == [1]
    assert mrcnn.batched_nms(boxes, scores, torch.tensor([0, 1, 0]), 0.5).tolist() == [1, 2, 0]


def test_roi_align_hand_computed() -> None:
    # feature value = column index; pixel j spans [j, j + 1], so at image x the value is x - 0.5
    feat = torch.arange(8.0).expand(2, 1, 8, 8).clone()
    feat[1] *= 10  # the second image
    rois = torch.tensor([[2.0, 2, 6, 6], [2.0, 2, 6, 6]])
    out = mrcnn.roi_align(feat, rois, torch.tensor([0, 1]), 2, 1.0)
    # bin centres at x = 3 and 5: samples at 2.5, 3.5 | 4.5, 5.5 -> values 2, 3 | 4, 5
    assert torch.allclose(out[0, 0], torch.tensor([[2.5, 4.5], [2.5, 4.5]]))
    assert torch.allclose(out[1, 0], 10 * out[0, 0])
    # at stride 2, the same image-coordinate box covers half as many feature cells
    half = mrcnn.roi_align(feat[:1], rois[:1] * 2, torch.tensor([0]), 2, 0.5)
    assert torch.allclose(half, out[:1])


def test_roi_align_matches_grid_sample() -> None:
    """Against an independent implementation: bilinear grid_sample at every sample point, averaged."""
    torch.manual_seed(0)
    feat = torch.randn(3, 4, 8, 8)
    rois = torch.tensor([[0.0, 0, 32, 32], [3.3, 5.1, 17.9, 12.2], [10, 20, 11, 21], [-2, -2, 40, 40]])
    bidx = torch.tensor([0, 2, 1, 2])
    out, s, scale = 3, 2, 0.25
    n = out * s
    t = (torch.arange(n) + 0.5) / n
    ref = []
    for roi, b in zip(rois, bidx, strict=True):
        xs = (roi[0] + t * (roi[2] - roi[0])) * scale
        ys = (roi[1] + t * (roi[3] - roi[1])) * scale
        grid = torch.stack(torch.meshgrid(2 * xs / 8 - 1, 2 * ys / 8 - 1, indexing="xy"), -1)
        sampled = F.grid_sample(feat[b : b + 1], grid[None], align_corners=False, padding_mode="border")
        ref.append(F.avg_pool2d(sampled, s)[0])
    assert torch.allclose(mrcnn.roi_align(feat, rois, bidx, out, scale), torch.stack(ref), atol=1e-5)


def test_roi_align_gradient_reaches_only_the_roi_image() -> None:
    feat = torch.ones(2, 1, 8, 8, requires_grad=True)
    mrcnn.roi_align(feat, torch.tensor([[0.0, 0, 4, 4]]), torch.tensor([1]), 2, 1.0).sum().backward()
    assert feat.grad[0].abs().sum() == 0 and feat.grad[1].sum() == pytest.approx(4.0)
    assert feat.grad[1, 0, 5:, :].abs().sum() == 0  # nothing outside the box's neighbourhood


def test_fpn_level() -> None:
    rois = torch.tensor([[0.0, 0, 8, 8], [0, 0, 15, 15], [0, 0, 16, 16], [0, 0, 32, 32], [0, 0, 500, 500],
                         [0, 0, 2, 2]])
    assert mrcnn.fpn_level(rois, 4, 16.0, 2).tolist() == [0, 0, 1, 2, 3, 0]


def test_sample_is_balanced() -> None:
    torch.manual_seed(0)
    positive = torch.zeros(3, 100, dtype=torch.bool)
    positive[0, :50] = True
    positive[1, :2] = True
    negative = ~positive
    negative[2, 90:] = False
    pos, neg = mrcnn.sample(positive, negative, 16, 0.25)
    assert pos.sum(1).tolist() == [4, 2, 0]  # at most a quarter positive
    assert neg.sum(1).tolist() == [12, 14, 16]  # negatives fill the rest
    assert not (pos & ~positive).any() and not (neg & ~negative).any()
    assert len({tuple(mrcnn.sample(positive, negative, 16, 0.25)[1][0].nonzero().flatten().tolist())
                for _ in range(3)}) > 1  # random, not the first ones


def test_match_low_quality() -> None:
    anchors = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 5], [20, 20, 24, 24], [40, 40, 50, 50]])
    gt = torch.tensor([[[0.0, 0, 10, 10], [20, 20, 30, 30]]])
    m = mrcnn.match(anchors, gt, torch.tensor([[True, True]]), 0.7, 0.3)[0].tolist()
    # IoU 1; 0.5 (between thresholds); 0.16 but the best anchor of object 1; 0
    assert m == [0, mrcnn.IGNORE, 1, mrcnn.BACKGROUND]


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
    target = mrcnn.roi_align(mask, torch.tensor([[6.0, 4, 20, 12]]), torch.tensor([0]), 10, 1.0) >= 0.5
    assert target.all()
    wider = mrcnn.roi_align(mask, torch.tensor([[0.0, 4, 26, 12]]), torch.tensor([0]), 10, 1.0) >= 0.5
    assert not wider.all() and wider.any()
