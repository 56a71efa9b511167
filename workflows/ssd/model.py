"""Mini RetinaNet (MLPerf Training 2.0 "ssd"): one-stage object detection on generated scenes.

The real benchmark trains RetinaNet (ResNeXt-50 + FPN, a class subnet and a box subnet shared over
the pyramid levels, focal loss) on OpenImages and stops at 0.34 COCO mAP. This mini version keeps
every part of that recipe and shrinks the sizes:

- data: 32x32 RGB images with a few filled rectangles, discs and triangles (random size, aspect and
  colour, so the class is the *shape*) on a noisy background; boxes are the tight boxes of the shapes;
- model: a small conv backbone, an FPN over strides 4 and 8 plus one extra stride-16 level (the
  role of P6/P7), and the RetinaNet head: two conv towers shared by all levels, the class tower
  ending in per-anchor sigmoid logits, the box tower in per-anchor box deltas;
- training: anchors matched to objects by IoU (>= 0.5 object, < 0.4 background, in between ignored,
  plus each object's best anchor), sigmoid focal loss over all anchors and L1 loss on the box deltas
  of matched anchors, both normalised by the number of matched anchors; Adam, linear warmup, then a
  constant learning rate, as in the reference;
- evaluation: score threshold, per-class NMS, top detections per image, and COCO mAP@[.5:.95] from
  pycocotools, the metric the real benchmark reports.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torch import nn

SHAPES = ("rectangle", "disc", "triangle")  # category ids 1, 2, 3 (0 pads the per-image lists)


# ---------------------------------------------------------------------------------------- data
def _shape_mask(kind: int, h: int, w: int, flip: bool) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w] + 0.5  # pixel centres
    if kind == 0:
        return np.ones((h, w), dtype=bool)
    if kind == 1:
        return ((xx - w / 2) / (w / 2)) ** 2 + ((yy - h / 2) / (h / 2)) ** 2 <= 1
    tri = np.abs(xx - w / 2) <= yy / h * (w / 2)
    return tri[::-1] if flip else tri


def _scene(rng: np.random.Generator, d: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image, its tight object boxes (x0, y0, x1, y1) and category ids, padded to max_objects."""
    s, k = d["image_size"], d["max_objects"]
    img = np.full((3, s, s), rng.uniform(0.1, 0.4), dtype=np.float32)
    boxes, labels = np.zeros((k, 4), np.float32), np.zeros(k, np.int64)
    placed: list[tuple[int, int, int, int]] = []
    for i in range(rng.integers(1, k + 1)):
        for _ in range(20):  # rejection sampling: objects do not touch, so every box is fully visible
            h, w = rng.integers(d["min_size"], d["max_size"] + 1, size=2)
            y, x = rng.integers(0, s - h + 1), rng.integers(0, s - w + 1)
            if all(x > b[2] or x + w < b[0] or y > b[3] or y + h < b[1] for b in placed):
                break
        else:
            continue
        placed.append((x, y, x + w, y + h))
        kind = int(rng.integers(len(SHAPES)))
        m = np.zeros((s, s), dtype=bool)
        m[y : y + h, x : x + w] = _shape_mask(kind, h, w, bool(rng.random() < 0.5))
        img[:, m] = rng.uniform(0.55, 1.0, size=(3, 1))  # any bright colour: colour says nothing of class
        ys, xs = np.nonzero(m)
        boxes[i] = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        labels[i] = kind + 1
    img += d["noise"] * rng.standard_normal(img.shape, dtype=np.float32)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8), boxes, labels


def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    d = params["data"]
    rng = np.random.default_rng(seed)
    for split in ("train", "eval"):
        scenes = [_scene(rng, d) for _ in range(d[f"{split}_samples"])]
        images, boxes, labels = (np.stack(x) for x in zip(*scenes, strict=True))
        np.savez(out_dir / f"{split}.npz", images=images, boxes=boxes, labels=labels)


# ----------------------------------------------------------------------------------- box utils
def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU of (..., N, 4) and (..., M, 4) boxes in (x0, y0, x1, y1): (..., N, M)."""
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    lt = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    rb = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[..., :, None] + area_b[..., None, :] - inter).clamp(min=1e-6)


def nms(boxes: torch.Tensor, scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Greedy NMS: indices of the kept boxes, best first. On the host: a few hundred boxes at most."""
    order = torch.argsort(scores, descending=True)
    iou = box_iou(boxes[order], boxes[order]).cpu().numpy()
    suppressed = np.zeros(len(order), dtype=bool)
    keep = []
    for i in range(len(order)):
        if not suppressed[i]:
            keep.append(i)
            suppressed |= iou[i] > threshold
    return order[torch.as_tensor(keep, dtype=torch.long, device=order.device)]


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, classes: torch.Tensor, threshold: float):
    """NMS within each class: shifting each class's boxes far apart makes one NMS call do them all."""
    if len(boxes) == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    offset = classes.to(boxes.dtype)[:, None] * (boxes.max() + 1)
    return nms(boxes + offset, scores, threshold)


# Deltas clamp: exp() of a large predicted log-scale would overflow early in training.
_MAX_LOG_SCALE = math.log(1000.0 / 16)


def encode(ref: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """Box deltas (dx, dy, dw, dh) that turn the reference boxes (anchors) into ``gt``."""
    rw, rh = ref[..., 2] - ref[..., 0], ref[..., 3] - ref[..., 1]
    gw, gh = gt[..., 2] - gt[..., 0], gt[..., 3] - gt[..., 1]
    dx = (gt[..., 0] + gt[..., 2] - ref[..., 0] - ref[..., 2]) / 2 / rw
    dy = (gt[..., 1] + gt[..., 3] - ref[..., 1] - ref[..., 3]) / 2 / rh
    return torch.stack((dx, dy, torch.log(gw / rw), torch.log(gh / rh)), dim=-1)


def decode(ref: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
    rw, rh = ref[..., 2] - ref[..., 0], ref[..., 3] - ref[..., 1]
    cx = (ref[..., 0] + ref[..., 2]) / 2 + deltas[..., 0] * rw
    cy = (ref[..., 1] + ref[..., 3]) / 2 + deltas[..., 1] * rh
    w = rw * torch.exp(deltas[..., 2].clamp(max=_MAX_LOG_SCALE))
    h = rh * torch.exp(deltas[..., 3].clamp(max=_MAX_LOG_SCALE))
    return torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), dim=-1)


def make_anchors(image_size: int, strides: list[int], sizes: list[list[float]], ratios: list[float]):
    """All anchors, level by level, each level in (y, x, anchor) order: the order the head's outputs
    are flattened in. ``ratio`` is height / width, the area stays size**2."""
    levels = []
    for stride, level_sizes in zip(strides, sizes, strict=True):
        n = image_size // stride
        centres = (torch.arange(n, dtype=torch.float32) + 0.5) * stride
        cy, cx = torch.meshgrid(centres, centres, indexing="ij")
        wh = torch.tensor([(s / math.sqrt(r), s * math.sqrt(r)) for s in level_sizes for r in ratios])
        ctr = torch.stack((cx, cy), dim=-1)[:, :, None, :]  # (n, n, 1, 2)
        levels.append(torch.cat((ctr - wh / 2, ctr + wh / 2), dim=-1).reshape(-1, 4))
    return torch.cat(levels)


BACKGROUND, IGNORE = -1, -2  # values of match() for anchors that are not matched to an object


def match(anchors: torch.Tensor, gt: torch.Tensor, valid: torch.Tensor, hi: float, lo: float):
    """For each image and anchor, the index of its object, BACKGROUND or IGNORE.

    gt: (B, G, 4) padded boxes, valid: (B, G). As in the reference, each object also claims the
    anchors it overlaps best even below ``hi``, so no object, however oddly shaped, goes unmatched.
    """
    iou = box_iou(gt, anchors).masked_fill(~valid[..., None], -1.0)  # (B, G, A)
    best, idx = iou.max(dim=1)
    matched = idx.masked_fill(best < hi, IGNORE).masked_fill(best < lo, BACKGROUND)
    best_per_gt = iou.max(dim=2, keepdim=True).values
    low_quality = ((iou == best_per_gt) & valid[..., None] & (best_per_gt > 0)).any(dim=1)
    return torch.where(low_quality, idx, matched)



def sigmoid_focal_loss(logits: torch.Tensor, targets: torch.Tensor, alpha: float, gamma: float):
    """Summed focal loss: the (1 - p_t)**gamma factor silences the flood of easy background anchors."""
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * ce * (1 - p_t) ** gamma).sum()


# --------------------------------------------------------------------------------------- model
def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class Body(nn.Module):
    """The backbone proper: a strided stem and two stages, giving features at strides 4 and 8."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = conv_bn(3, width, 2)  # 32x32 images need no full-resolution layer
        self.layer1 = nn.Sequential(conv_bn(width, 2 * width, 2), conv_bn(2 * width, 2 * width))
        self.layer2 = nn.Sequential(conv_bn(2 * width, 4 * width, 2), conv_bn(4 * width, 4 * width))
        self.out_channels = [2 * width, 4 * width]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        c2 = self.layer1(self.conv1(x))
        return [c2, self.layer2(c2)]


class FPN(nn.Module):
    """Top-down pathway with lateral 1x1 convs. RetinaNet adds stride-64 and -128 levels (P6, P7) for
    large objects; the largest object here fits the stride-8 level's anchors, so there is none."""

    def __init__(self, in_channels: list[int], ch: int) -> None:
        super().__init__()
        self.inner_blocks = nn.ModuleList(nn.Conv2d(c, ch, 1) for c in in_channels)
        self.layer_blocks = nn.ModuleList(nn.Conv2d(ch, ch, 3, padding=1) for _ in in_channels)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_uniform_(m.weight, a=1)
                nn.init.zeros_(m.bias)

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        last = self.inner_blocks[-1](feats[-1])
        outs = [self.layer_blocks[-1](last)]
        for i in range(len(feats) - 2, -1, -1):
            last = self.inner_blocks[i](feats[i]) + F.interpolate(last, size=feats[i].shape[-2:])
            outs.insert(0, self.layer_blocks[i](last))
        return outs


class Backbone(nn.Module):
    def __init__(self, width: int, fpn_channels: int) -> None:
        super().__init__()
        self.body = Body(width)
        self.fpn = FPN(self.body.out_channels, fpn_channels)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.fpn(self.body(x))


def _tower(ch: int, depth: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Conv2d(ch, ch, 3, padding=1), nn.GroupNorm(4, ch), nn.ReLU()]
    return nn.Sequential(*layers)


class ClassificationHead(nn.Module):
    def __init__(self, ch: int, depth: int, anchors: int, classes: int, prior: float) -> None:
        super().__init__()
        self.conv = _tower(ch, depth)
        self.cls_logits = nn.Conv2d(ch, anchors * classes, 3, padding=1)
        self.classes = classes
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, std=0.01)
                nn.init.zeros_(m.bias)
        # Start every anchor at P(object) = prior: otherwise the background anchors' loss swamps the
        # first steps (the RetinaNet paper's initialisation).
        nn.init.constant_(self.cls_logits.bias, -math.log((1 - prior) / prior))

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        out = [self.cls_logits(self.conv(f)).permute(0, 2, 3, 1) for f in feats]  # (B, H, W, A*K)
        return torch.cat([o.reshape(o.shape[0], -1, self.classes) for o in out], dim=1)


class RegressionHead(nn.Module):
    def __init__(self, ch: int, depth: int, anchors: int) -> None:
        super().__init__()
        self.conv = _tower(ch, depth)
        self.bbox_reg = nn.Conv2d(ch, anchors * 4, 3, padding=1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, std=0.01)
                nn.init.zeros_(m.bias)

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        out = [self.bbox_reg(self.conv(f)).permute(0, 2, 3, 1) for f in feats]
        return torch.cat([o.reshape(o.shape[0], -1, 4) for o in out], dim=1)


class RetinaHead(nn.Module):
    def __init__(self, ch: int, depth: int, anchors: int, classes: int, prior: float) -> None:
        super().__init__()
        self.classification_head = ClassificationHead(ch, depth, anchors, classes, prior)
        self.regression_head = RegressionHead(ch, depth, anchors)

    def forward(self, feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.classification_head(feats), self.regression_head(feats)


class RetinaNet(nn.Module):
    def __init__(self, p: dict[str, Any]) -> None:
        super().__init__()
        self.p = p
        sizes = [[s * scale for scale in p["anchor_scales"]] for s in p["anchor_sizes"]]
        self.register_buffer(
            "anchors", make_anchors(p["data"]["image_size"], p["strides"], sizes, p["anchor_ratios"])
        )
        num_anchors = len(p["anchor_scales"]) * len(p["anchor_ratios"])
        classes = len(SHAPES)
        self.backbone = Backbone(p["width"], p["fpn_channels"])
        self.head = RetinaHead(p["fpn_channels"], p["head_depth"], num_anchors, classes, 0.01)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head(self.backbone(images))

    def loss(self, images: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits, deltas = self(images)
        valid = labels > 0
        matched = match(self.anchors, boxes, valid, self.p["fg_iou"], self.p["bg_iou"])  # (B, A)
        fg = matched >= 0
        idx = matched.clamp(min=0)
        gt_boxes = torch.gather(boxes, 1, idx[..., None].expand(-1, -1, 4))  # (B, A, 4)
        gt_labels = torch.gather(labels, 1, idx)
        targets = torch.zeros_like(logits)
        targets[fg] = F.one_hot(gt_labels[fg] - 1, logits.shape[-1]).to(logits.dtype)
        num_fg = max(1, int(fg.sum()))
        cls_loss = sigmoid_focal_loss(logits[matched != IGNORE], targets[matched != IGNORE], 0.25, 2.0)
        anchors = self.anchors.expand_as(gt_boxes)
        box_loss = F.l1_loss(deltas[fg], encode(anchors[fg], gt_boxes[fg]), reduction="sum")
        return (cls_loss + box_loss) / num_fg

    @torch.no_grad()
    def detect(self, images: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(boxes, scores, category ids) per image, best first."""
        p, size = self.p, images.shape[-1]
        logits, deltas = self(images)
        classes = logits.shape[-1]
        results = []
        for lg, dl in zip(logits, deltas, strict=True):
            scores = torch.sigmoid(lg).flatten()  # (A * K), anchor-major
            keep = torch.nonzero(scores > p["score_threshold"]).squeeze(1)
            keep = keep[torch.argsort(scores[keep], descending=True)[: p["pre_nms_top_n"]]]
            anchor, cls = keep // classes, keep % classes
            boxes = decode(self.anchors[anchor], dl[anchor]).clamp(0, size)
            kept = batched_nms(boxes, scores[keep], cls, p["nms_threshold"])[: p["detections_per_image"]]
            results.append((boxes[kept], scores[keep][kept], cls[kept] + 1))
        return results


# ---------------------------------------------------------------------------------- evaluation
def coco_ground_truth(boxes: np.ndarray, labels: np.ndarray, image_size: int) -> COCO:
    images, anns = [], []
    for i, (bs, ls) in enumerate(zip(boxes, labels, strict=True)):
        images.append({"id": i, "width": image_size, "height": image_size})
        for b, lab in zip(bs, ls, strict=True):
            if lab > 0:
                x0, y0, x1, y1 = (float(v) for v in b)
                anns.append({
                    "id": len(anns) + 1, "image_id": i, "category_id": int(lab), "iscrowd": 0,
                    "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                })
    coco = COCO()
    coco.dataset = {
        "images": images, "annotations": anns,
        "categories": [{"id": k + 1, "name": n} for k, n in enumerate(SHAPES)],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def coco_map(gt: COCO, detections: list[dict[str, Any]]) -> float:
    """COCO mAP@[.5:.95] of detections ({"image_id", "category_id", "bbox": [x, y, w, h], "score"})."""
    if not detections:
        return 0.0  # loadRes refuses an empty list
    with contextlib.redirect_stdout(io.StringIO()):
        ev = COCOeval(gt, gt.loadRes(detections), "bbox")
        # Every object here is "small" by COCO's definition (< 32**2 pixels): evaluating only the
        # "all" area range gives the same mAP for a quarter of the time.
        ev.params.areaRng, ev.params.areaRngLbl = [[0, 1e10]], ["all"]
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return max(0.0, float(ev.stats[0]))  # -1 means "no ground truth": cannot happen here


def to_coco(image_id: int, boxes: torch.Tensor, scores: torch.Tensor, cats: torch.Tensor):
    out = []
    for b, s, c in zip(boxes.tolist(), scores.tolist(), cats.tolist(), strict=True):
        out.append({
            "image_id": image_id, "category_id": c, "score": s,
            "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
        })
    return out


# ------------------------------------------------------------------------------------ workload
class Workload:
    higher_is_better = True

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device) -> None:
        self.device = device
        self.p = params
        train, evals = np.load(data_dir / "train.npz"), np.load(data_dir / "eval.npz")
        self.x = torch.from_numpy(train["images"]).to(device)  # uint8: scaled per batch
        self.boxes = torch.from_numpy(train["boxes"]).to(device)
        self.labels = torch.from_numpy(train["labels"]).to(device)
        self.ex = torch.from_numpy(evals["images"]).to(device)
        self.coco_gt = coco_ground_truth(evals["boxes"], evals["labels"], params["data"]["image_size"])
        self.model = RetinaNet(params).to(device)
        self.batch = params["batch_size"]
        self.steps_per_epoch = math.ceil(len(self.x) / self.batch)
        # The reference: Adam without weight decay, warmup from warmup_factor * lr, then constant.
        self.opt = torch.optim.Adam(self.model.parameters(), lr=params["lr"], weight_decay=0.0, foreach=True)
        warmup, factor = self.steps_per_epoch * params["warmup_epochs"], params["warmup_factor"]
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: factor + (1 - factor) * s / warmup if s < warmup else 1.0
        )
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "opt_name": "adam",
            "opt_base_learning_rate": params["lr"],
            "opt_weight_decay": 0.0,
            "opt_learning_rate_warmup_epochs": params["warmup_epochs"],
            "opt_learning_rate_warmup_factor": factor,
        }
        self.train_samples = len(self.x)
        self.eval_samples = len(self.ex)

    def initialized_tensors(self) -> list[str]:
        return [name for name, _ in self.model.named_parameters()]

    def _images(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() / 255 - 0.5

    def train_epoch(self, epoch: int) -> None:
        self.model.train()
        gen = torch.Generator().manual_seed(torch.initial_seed() * 1000 + epoch)
        order = torch.randperm(len(self.x), generator=gen).to(self.device)
        for i in range(self.steps_per_epoch):
            idx = order[i * self.batch : (i + 1) * self.batch]
            loss = self.model.loss(self._images(self.x[idx]), self.boxes[idx], self.labels[idx])
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            self.sched.step()

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        detections = []
        for start in range(0, len(self.ex), 256):
            results = self.model.detect(self._images(self.ex[start : start + 256]))
            for j, (boxes, scores, cats) in enumerate(results):
                detections += to_coco(start + j, boxes, scores, cats)
        return coco_map(self.coco_gt, detections)
