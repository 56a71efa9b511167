"""The detection geometry shared by the mini ssd and maskrcnn (mlrepro.training.detection), against hand-computed
values, against independent implementations, and against torchvision.ops where torchvision loads."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mlrepro.training import detection as D


def test_box_iou_hand_computed_and_batched() -> None:
    a = torch.tensor([[0.0, 0, 2, 2]])
    b = torch.tensor([[1.0, 1, 3, 3], [0, 0, 2, 2], [5, 5, 6, 6], [0, 0, 4, 2]])
    assert torch.allclose(D.box_iou(a, b), torch.tensor([[1 / 7, 1.0, 0.0, 0.5]]))
    batched = D.box_iou(torch.stack((a, b[:1])), b)  # (2, 1, 4) against (4, 4)
    assert torch.allclose(batched[0], D.box_iou(a, b)) and torch.allclose(batched[1], D.box_iou(b[:1], b))


def test_box_coder_round_trip_and_weights() -> None:
    anchor = torch.tensor([[0.0, 0, 4, 4]])
    gt = torch.tensor([[2.0, 0, 6, 8]])  # centre moved by half a width, twice as tall
    coder = D.BoxCoder()
    assert torch.allclose(coder.encode(anchor, gt), torch.tensor([[0.5, 0.5, 0.0, math.log(2)]]))
    assert torch.allclose(coder.decode(anchor, coder.encode(anchor, gt)), gt)
    weighted = D.BoxCoder((10.0, 10.0, 5.0, 5.0))
    assert torch.allclose(weighted.encode(anchor, gt), torch.tensor([[5.0, 5.0, 0.0, 5 * math.log(2)]]))
    assert torch.allclose(weighted.decode(anchor, weighted.encode(anchor, gt)), gt)
    huge = coder.decode(anchor, torch.tensor([[0.0, 0, 100, 100]]))  # clipped: no overflow
    assert torch.isfinite(huge).all() and huge[0, 2] == pytest.approx(2 + 2 * 1000 / 16)


def test_nms_and_batched_nms() -> None:
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30], [0, 1, 10, 11]])
    scores = torch.tensor([0.5, 0.9, 0.8, 0.3])
    assert D.nms(boxes, scores, 0.5).tolist() == [1, 2]  # box 1 suppresses 0 and 3
    assert D.nms(boxes, scores, 0.95).tolist() == [1, 2, 0, 3]
    classes = torch.tensor([0, 1, 0, 0])  # box 1 is another class: it suppresses nothing
    assert D.batched_nms(boxes, scores, classes, 0.5).tolist() == [1, 2, 0]
    assert D.batched_nms(boxes[:0], scores[:0], classes[:0], 0.5).tolist() == []


def test_grid_anchors_order_and_shape() -> None:
    levels = D.grid_anchors(16, [4, 8], [[4.0], [8.0]], [0.5, 1.0, 2.0])
    assert [a.shape for a in levels] == [(4 * 4 * 3, 4), (2 * 2 * 3, 4)]
    # level 0, cell (y=0, x=0): centre (2, 2); ratio h/w = 0.5 with area 16
    w, h = 4 / math.sqrt(0.5), 4 * math.sqrt(0.5)
    assert torch.allclose(levels[0][0], torch.tensor([2 - w / 2, 2 - h / 2, 2 + w / 2, 2 + h / 2]))
    assert torch.allclose(levels[0][1], torch.tensor([0.0, 0, 4, 4]))
    assert torch.allclose(levels[0][4], torch.tensor([4.0, 0, 8, 4]))  # next cell along x, square
    assert torch.allclose(levels[1][1], torch.tensor([0.0, 0, 8, 8]))
    two_sizes = D.grid_anchors(8, [8], [[4.0, 8.0]], [1.0, 2.0])[0]  # sizes outer, ratios inner
    assert two_sizes.shape == (4, 4) and torch.allclose(two_sizes[::2], torch.tensor([[2.0, 2, 6, 6], [0, 0, 8, 8]]))


def test_match_thresholds_and_low_quality() -> None:
    anchors = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 6], [0, 0, 10, 4.5], [50, 50, 60, 60], [30, 30, 31, 31]])
    gt = torch.tensor([[[0.0, 0, 10, 10], [30, 30, 33, 33], [0, 0, 0, 0]]])
    valid = torch.tensor([[True, True, False]])
    # IoU 1 -> object 0; 0.6 -> object 0; 0.45 -> ignored; 0 -> background;
    # the last anchor has IoU 1/9 with object 1, but it is that object's best anchor, so it is kept.
    assert D.match(anchors, gt, valid, 0.5, 0.4)[0].tolist() == [0, 0, D.BETWEEN_THRESHOLDS, D.BELOW_LOW_THRESHOLD, 1]
    strict = D.match(anchors, gt, valid, 0.5, 0.4, allow_low_quality_matches=False)[0].tolist()
    assert strict == [0, 0, D.BETWEEN_THRESHOLDS, D.BELOW_LOW_THRESHOLD, D.BELOW_LOW_THRESHOLD]


def test_focal_loss() -> None:
    logits = torch.tensor([3.0, -3.0, 0.0])
    targets = torch.tensor([1.0, 0.0, 1.0])
    bce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    assert torch.allclose(D.sigmoid_focal_loss(logits, targets, 0.5, 0.0), 0.5 * bce)
    assert torch.isclose(D.sigmoid_focal_loss(logits, targets, -1, 0.0, reduction="sum"), bce.sum())
    # gamma > 0 shrinks the loss of the two easy examples far more than that of the hard one
    focal = D.sigmoid_focal_loss(logits, targets, 0.5, 2.0)
    assert focal[:2].sum() < 0.01 * 0.5 * bce[:2].sum() and focal[2] > 0.2 * 0.5 * bce[2]


def _boxes(rois: list[list[float]], batch: list[int]) -> torch.Tensor:
    return torch.cat((torch.tensor(batch, dtype=torch.float32)[:, None], torch.tensor(rois)), dim=1)


def test_roi_align_hand_computed() -> None:
    # feature value = column index; with aligned=True cell j has its centre at image x = j + 0.5
    feat = torch.arange(8.0).expand(2, 1, 8, 8).clone()
    feat[1] *= 10  # the second image
    out = D.roi_align(feat, _boxes([[2.0, 2, 6, 6], [2.0, 2, 6, 6]], [0, 1]), 2)
    # bin centres at x = 3 and 5: samples at 2.5, 3.5 | 4.5, 5.5 -> values 2, 3 | 4, 5
    assert torch.allclose(out[0, 0], torch.tensor([[2.5, 4.5], [2.5, 4.5]]))
    assert torch.allclose(out[1, 0], 10 * out[0, 0])
    # at stride 2, the same image-coordinate box covers half as many feature cells
    half = D.roi_align(feat[:1], _boxes([[4.0, 4, 12, 12]], [0]), 2, spatial_scale=0.5)
    assert torch.allclose(half, out[:1])
    # torchvision's edge rule: within a cell of the map the edge value, further out nothing
    edge = D.roi_align(feat[:1], _boxes([[6.0, 0, 10, 8], [8.0, 0, 12, 8]], [0, 0]), 1, sampling_ratio=1)
    assert edge[:, 0, 0, 0].tolist() == [7.0, 0.0]  # sample at x = 8 (in cells 7.5: the edge) and 10 (out)


def test_roi_align_matches_grid_sample() -> None:
    """Against an independent implementation: bilinear grid_sample at every sample point, averaged."""
    torch.manual_seed(0)
    feat = torch.randn(3, 4, 8, 8)
    rois = [[0.0, 0, 32, 32], [3.3, 5.1, 17.9, 12.2], [10, 20, 11, 21], [1, 2, 30, 31]]
    bidx = [0, 2, 1, 2]
    out, s, scale = 3, 2, 0.25
    t = (torch.arange(out * s) + 0.5) / (out * s)
    ref = []
    for roi, b in zip(torch.tensor(rois), bidx, strict=True):
        xs = (roi[0] + t * (roi[2] - roi[0])) * scale
        ys = (roi[1] + t * (roi[3] - roi[1])) * scale
        grid = torch.stack(torch.meshgrid(2 * xs / 8 - 1, 2 * ys / 8 - 1, indexing="xy"), -1)
        sampled = F.grid_sample(feat[b : b + 1], grid[None], align_corners=False, padding_mode="border")
        ref.append(F.avg_pool2d(sampled, s)[0])
    assert torch.allclose(D.roi_align(feat, _boxes(rois, bidx), out, scale), torch.stack(ref), atol=1e-5)


def test_roi_align_gradient_reaches_only_the_roi_image() -> None:
    feat = torch.ones(2, 1, 8, 8, requires_grad=True)
    D.roi_align(feat, _boxes([[0.0, 0, 4, 4]], [1]), 2).sum().backward()
    assert feat.grad[0].abs().sum() == 0 and feat.grad[1].sum() == pytest.approx(4.0)
    assert feat.grad[1, 0, 5:, :].abs().sum() == 0  # nothing outside the box's neighbourhood


def test_roi_levels_and_multiscale() -> None:
    rois = torch.tensor([[0.0, 0, 8, 8], [0, 0, 15, 15], [0, 0, 16, 16], [0, 0, 32, 32], [0, 0, 500, 500],
                         [0, 0, 2, 2], [0, 0, 0, 0]])
    assert D.roi_levels(rois, 1, 4, 16.0, 2).tolist() == [0, 0, 1, 2, 3, 0, 0]
    feats = [torch.full((1, 1, 16 // s, 16 // s), float(s)) for s in (2, 4, 8, 16)]
    pooled = D.multiscale_roi_align(feats, [2, 4, 8, 16], _boxes(rois[:4].tolist(), [0] * 4), 2, (16.0, 2))
    assert pooled[:, 0, 0, 0].tolist() == [2.0, 2.0, 4.0, 8.0]  # each from its level's map


def _torchvision_ops():
    try:
        from torchvision import ops
    except (ImportError, RuntimeError):  # not installed, or its C++ operators do not load (CUDA build)
        pytest.skip("torchvision.ops does not load here: its PyPI wheels need the CUDA build of torch "
                    "(torch 2.14.1 + torchvision 0.29.1 pass this test)")
    return ops


def test_same_as_torchvision_ops() -> None:
    ops = _torchvision_ops()
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(200, 2, generator=g) * 28
    boxes = torch.cat((xy, xy + 1 + torch.rand(200, 2, generator=g) * 12), dim=1)
    scores, classes = torch.rand(200, generator=g), torch.randint(3, (200,), generator=g)
    assert torch.allclose(D.box_iou(boxes, boxes[:50]), ops.box_iou(boxes, boxes[:50]))
    assert D.nms(boxes, scores, 0.5).tolist() == ops.nms(boxes, scores, 0.5).tolist()
    assert D.batched_nms(boxes, scores, classes, 0.5).tolist() == ops.batched_nms(boxes, scores, classes, 0.5).tolist()
    logits, targets = torch.randn(100, generator=g), (torch.rand(100, generator=g) < 0.3).float()
    assert torch.allclose(D.sigmoid_focal_loss(logits, targets, reduction="sum"),
                          ops.sigmoid_focal_loss(logits, targets, reduction="sum"))
    feat = torch.randn(2, 3, 8, 8, generator=g)
    rois = torch.cat((torch.randint(2, (200, 1), generator=g).float(), boxes * 1.3 - 4), dim=1)  # some beyond edges
    assert torch.allclose(D.roi_align(feat, rois, 5, 0.25), ops.roi_align(feat, rois, 5, 0.25, 2, aligned=True),
                          atol=1e-5)


def test_same_as_torchvision_box_coder_and_matcher() -> None:
    _torchvision_ops()
    from torchvision.models.detection import _utils as det_utils

    g = torch.Generator().manual_seed(1)
    xy = torch.rand(100, 2, generator=g) * 28
    ref = torch.cat((xy, xy + 1 + torch.rand(100, 2, generator=g) * 12), dim=1)
    gt = ref.flip(0) + torch.rand(100, 4, generator=g)
    for weights in ((1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0)):
        ours, theirs = D.BoxCoder(weights), det_utils.BoxCoder(weights)
        deltas = ours.encode(ref, gt)
        assert torch.allclose(deltas, theirs.encode_single(gt, ref), atol=1e-5)
        assert torch.allclose(ours.decode(ref, deltas), theirs.decode_single(deltas, ref), atol=1e-4)
    anchors, objects = ref, gt[:5]
    for high, low, low_quality in ((0.7, 0.3, True), (0.5, 0.4, True), (0.5, 0.5, False)):
        theirs = det_utils.Matcher(high, low, allow_low_quality_matches=low_quality)(D.box_iou(objects, anchors))
        ours = D.match(anchors, objects[None], torch.ones(1, 5, dtype=torch.bool), high, low, low_quality)[0]
        assert ours.tolist() == theirs.tolist()
