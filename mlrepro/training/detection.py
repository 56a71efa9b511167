"""Detection geometry of the mini ssd (RetinaNet) and maskrcnn models: IoU, NMS, box coding, anchors,
matching, focal loss and RoI Align, in one place.

Each function has the signature and the semantics of its counterpart in ``torchvision.ops`` or
``torchvision.models.detection`` (named in its docstring), the operators MLPerf's reference
implementations use, so the two are interchangeable. They are written here rather than imported
because torchvision's x86-64 wheels on PyPI are CUDA builds whose C++ operators (``nms``,
``roi_align``) do not load next to the CPU wheel of torch this project pins.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F


def box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """``torchvision.ops.box_iou``, batched: (..., N, 4) and (..., M, 4) boxes in (x1, y1, x2, y2) give
    (..., N, M) IoUs."""
    area1 = (boxes1[..., 2] - boxes1[..., 0]) * (boxes1[..., 3] - boxes1[..., 1])
    area2 = (boxes2[..., 2] - boxes2[..., 0]) * (boxes2[..., 3] - boxes2[..., 1])
    lt = torch.maximum(boxes1[..., :, None, :2], boxes2[..., None, :, :2])
    rb = torch.minimum(boxes1[..., :, None, 2:], boxes2[..., None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area1[..., :, None] + area2[..., None, :] - inter).clamp(min=1e-6)  # no 0/0 for empty boxes


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """``torchvision.ops.nms``: indices of the kept boxes, by decreasing score; a box is dropped when
    its IoU with a kept, better one is above ``iou_threshold``. Greedy, on the host: the mini models
    have a few hundred boxes at most."""
    order = torch.argsort(scores, descending=True)
    iou = box_iou(boxes[order], boxes[order]).cpu().numpy()  # numpy: element access costs ns, not µs
    suppressed = np.zeros(len(order), dtype=bool)
    keep = []
    for i in range(len(order)):
        if not suppressed[i]:
            keep.append(i)
            suppressed |= iou[i] > iou_threshold
    return order[torch.as_tensor(keep, dtype=torch.long, device=order.device)]


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """``torchvision.ops.batched_nms``: NMS within each category ``idxs``. Shifting each category's boxes
    beyond all others makes one NMS call do them all (torchvision's coordinate trick)."""
    if len(boxes) == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    offsets = idxs.to(boxes.dtype)[:, None] * (boxes.max() + 1)
    return nms(boxes + offsets, scores, iou_threshold)


def sigmoid_focal_loss(inputs: torch.Tensor, targets: torch.Tensor, alpha: float = 0.25, gamma: float = 2.0,
                       reduction: str = "none") -> torch.Tensor:
    """``torchvision.ops.sigmoid_focal_loss``: the (1 - p_t)**gamma factor silences the flood of easy
    background anchors."""
    p = torch.sigmoid(inputs)
    ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * (1 - p_t) ** gamma
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    return loss


class BoxCoder:
    """``torchvision.models.detection._utils.BoxCoder``: box deltas (dx, dy, dw, dh), scaled by
    ``weights``, that turn reference boxes (anchors, proposals) into target boxes."""

    def __init__(self, weights: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0),
                 bbox_xform_clip: float = math.log(1000.0 / 16)) -> None:
        self.weights = weights
        self.bbox_xform_clip = bbox_xform_clip  # exp() of a wild early prediction would overflow

    def encode(self, reference: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        wx, wy, ww, wh = self.weights
        rw, rh = reference[..., 2] - reference[..., 0], reference[..., 3] - reference[..., 1]
        gw, gh = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
        dx = wx * ((boxes[..., 0] + 0.5 * gw) - (reference[..., 0] + 0.5 * rw)) / rw
        dy = wy * ((boxes[..., 1] + 0.5 * gh) - (reference[..., 1] + 0.5 * rh)) / rh
        return torch.stack((dx, dy, ww * torch.log(gw / rw), wh * torch.log(gh / rh)), dim=-1)

    def decode(self, reference: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
        wx, wy, ww, wh = self.weights
        rw, rh = reference[..., 2] - reference[..., 0], reference[..., 3] - reference[..., 1]
        cx = reference[..., 0] + 0.5 * rw + deltas[..., 0] / wx * rw
        cy = reference[..., 1] + 0.5 * rh + deltas[..., 1] / wy * rh
        w = rw * torch.exp((deltas[..., 2] / ww).clamp(max=self.bbox_xform_clip))
        h = rh * torch.exp((deltas[..., 3] / wh).clamp(max=self.bbox_xform_clip))
        return torch.stack((cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h), dim=-1)


def grid_anchors(image_size: int, strides: list[int], sizes: list[list[float]],
                 ratios: list[float]) -> list[torch.Tensor]:
    """Per pyramid level, anchors as ``torchvision.models.detection.AnchorGenerator`` makes them (every
    size with every ratio, ``ratio`` = height / width at constant area), in (y, x, anchor) order, the
    order a head's outputs are flattened in. Unlike torchvision's they sit on the cells' centres, not
    their corners, and are not rounded to whole pixels: on 32-pixel images both would bias the boxes."""
    levels = []
    for stride, level_sizes in zip(strides, sizes, strict=True):
        n = image_size // stride
        centres = (torch.arange(n, dtype=torch.float32) + 0.5) * stride
        cy, cx = torch.meshgrid(centres, centres, indexing="ij")
        wh = torch.tensor([(s / math.sqrt(r), s * math.sqrt(r)) for s in level_sizes for r in ratios])
        ctr = torch.stack((cx, cy), dim=-1)[:, :, None, :]  # (n, n, 1, 2)
        levels.append(torch.cat((ctr - wh / 2, ctr + wh / 2), dim=-1).reshape(-1, 4))
    return levels


BELOW_LOW_THRESHOLD, BETWEEN_THRESHOLDS = -1, -2  # torchvision's Matcher values: background, ignored


def match(anchors: torch.Tensor, gt: torch.Tensor, valid: torch.Tensor, high: float, low: float,
          allow_low_quality_matches: bool = True) -> torch.Tensor:
    """``torchvision.models.detection._utils.Matcher``, batched: for each image and anchor, the index of
    its object, BELOW_LOW_THRESHOLD or BETWEEN_THRESHOLDS.

    gt: (B, G, 4) padded boxes, valid: (B, G). With ``allow_low_quality_matches`` each object also
    claims the anchors it overlaps best even below ``high``, so none, however oddly shaped, goes
    unmatched (an object that overlaps no anchor at all claims none).
    """
    iou = box_iou(gt, anchors).masked_fill(~valid[..., None], -1.0)  # (B, G, A)
    best, idx = iou.max(dim=1)
    matched = idx.masked_fill(best < high, BETWEEN_THRESHOLDS).masked_fill(best < low, BELOW_LOW_THRESHOLD)
    if not allow_low_quality_matches:
        return matched
    best_per_gt = iou.max(dim=2, keepdim=True).values
    low_quality = ((iou == best_per_gt) & valid[..., None] & (best_per_gt > 0)).any(dim=1)
    return torch.where(low_quality, idx, matched)


def _bin_weights(lo: torch.Tensor, hi: torch.Tensor, out: int, sampling: int, size: int) -> torch.Tensor:
    """(R, out, size): how much each feature row (or column) contributes to each output bin along one
    axis, for RoIs spanning [lo, hi] in feature coordinates."""
    n = out * sampling
    t = (torch.arange(n, device=lo.device, dtype=lo.dtype) + 0.5) / n
    x = lo[:, None] - 0.5 + t * (hi - lo)[:, None]  # sample points; feature cell i has its centre at i
    inside = ((x >= -1) & (x <= size)).to(x.dtype)  # torchvision: a sample further out counts as 0
    x = x.clamp(0, size - 1)  # ... and one within a cell of the edge takes the edge's value
    cells = torch.arange(size, device=lo.device, dtype=lo.dtype)
    tent = (1 - (x[:, :, None] - cells).abs()).clamp(min=0) * inside[:, :, None]  # linear interpolation
    return tent.view(len(lo), out, sampling, size).mean(dim=2)


def roi_align(input: torch.Tensor, boxes: torch.Tensor, output_size: int, spatial_scale: float = 1.0,
              sampling_ratio: int = 2) -> torch.Tensor:
    """``torchvision.ops.roi_align`` with ``aligned=True``: (K, C, out, out) features of the boxes
    (K, 5) = (batch index, x1, y1, x2, y2) in image coordinates on ``input`` (N, C, H, W).

    Each bin averages ``sampling_ratio``**2 bilinear samples at evenly spaced points, with no rounding
    of the box to the feature grid. The points form a grid and bilinear interpolation is separable,
    so the whole operation is two small matrix products per RoI: (rows -> bins) @ map @ (columns -> bins)^T.
    """
    h, w = input.shape[-2:]
    b = boxes[:, 1:] * spatial_scale
    wy = _bin_weights(b[:, 1], b[:, 3], output_size, sampling_ratio, h)  # (K, out, H)
    wx = _bin_weights(b[:, 0], b[:, 2], output_size, sampling_ratio, w)  # (K, out, W)
    return wy[:, None] @ input[boxes[:, 0].long()] @ wx[:, None].transpose(-1, -2)


def roi_levels(boxes: torch.Tensor, k_min: int, k_max: int, canonical_scale: float,
               canonical_level: int) -> torch.Tensor:
    """``torchvision.ops.poolers.LevelMapper``: the pyramid level (0-based from ``k_min``) to pool each
    box (R, 4) from, one level finer per halving of its size; a ``canonical_scale`` box goes to
    ``canonical_level`` (the reference: 224 pixels to P4)."""
    size = torch.sqrt((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]))
    k = torch.floor(canonical_level + torch.log2(size / canonical_scale) + 1e-6)
    return k.clamp(k_min, k_max).long() - k_min


def multiscale_roi_align(features: list[torch.Tensor], strides: list[int], boxes: torch.Tensor, output_size: int,
                         canonical: tuple[float, int], sampling_ratio: int = 2) -> torch.Tensor:
    """``torchvision.ops.MultiScaleRoIAlign``: each box (K, 5) pooled from the level that suits its size.
    The levels are numbered 1, 2, ... from the finest."""
    result = features[0].new_zeros(len(boxes), features[0].shape[1], output_size, output_size)
    level = roi_levels(boxes[:, 1:], 1, len(features), *canonical)
    for i, (f, stride) in enumerate(zip(features, strides, strict=True)):
        idx = torch.nonzero(level == i).squeeze(1)
        if len(idx):
            result[idx] = roi_align(f, boxes[idx], output_size, 1.0 / stride, sampling_ratio)
    return result
