"""Mini RetinaNet (MLPerf Training 2.0 "ssd"): one-stage object detection on generated scenes.

The real benchmark trains RetinaNet (ResNeXt-50 + FPN, a class subnet and a box subnet shared over
the pyramid levels, focal loss) on OpenImages and stops at 0.34 COCO mAP. This mini version keeps
every part of that recipe and shrinks the sizes:

- data: 32x32 RGB images with a few filled rectangles, discs and triangles (random size, aspect and
  colour, so the class is the *shape*) on a noisy background; boxes are the tight boxes of the shapes;
- model: a small conv backbone, an FPN over strides 4 and 8, and the RetinaNet head: two conv towers
  shared by all levels, the class tower ending in per-anchor sigmoid logits, the box tower in
  per-anchor box deltas;
- training: anchors matched to objects by IoU (>= 0.5 object, < 0.4 background, in between ignored,
  plus each object's best anchor), sigmoid focal loss over all anchors and L1 loss on the box deltas
  of matched anchors, both normalised by the number of matched anchors; Adam, linear warmup, then a
  constant learning rate, as in the reference;
- evaluation: score threshold, per-class NMS, top detections per image, and COCO mAP@[.5:.95] from
  pycocotools, the metric the real benchmark reports.

The box geometry (IoU, NMS, box coding, anchors, matching, focal loss) is shared with the maskrcnn
model: ``mlrepro.training.detection``, written to torchvision.ops' semantics; so are the scenes
(``mlrepro.training.scenes``) and the FPN (``mlrepro.training.fpn``).
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torch import nn

from mlrepro.training.detection import (
    BETWEEN_THRESHOLDS,
    BoxCoder,
    batched_nms,
    grid_anchors,
    match,
    sigmoid_focal_loss,
)
from mlrepro.training.epoch_order import epoch_generator, shuffled_batches
from mlrepro.training.fpn import Backbone, conv_bn
from mlrepro.training.scenes import SHAPES, scene


# ---------------------------------------------------------------------------------------- data
def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    d = params["data"]
    rng = np.random.default_rng(seed)
    for split in ("train", "eval"):
        scenes = [scene(rng, d) for _ in range(d[f"{split}_samples"])]
        images, _, boxes, labels = (np.stack(x) for x in zip(*scenes, strict=True))  # no masks: boxes only
        np.savez(out_dir / f"{split}.npz", images=images, boxes=boxes, labels=labels)


# --------------------------------------------------------------------------------------- model
class Body(nn.Module):
    """The backbone proper: a strided stem and two stages, giving features at strides 4 and 8. RetinaNet's
    FPN adds stride-64 and -128 levels (P6, P7) for large objects; the largest object here fits the
    stride-8 level's anchors, so there is none."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = conv_bn(3, width, 2)  # 32x32 images need no full-resolution layer
        self.layer1 = nn.Sequential(conv_bn(width, 2 * width, 2), conv_bn(2 * width, 2 * width))
        self.layer2 = nn.Sequential(conv_bn(2 * width, 4 * width, 2), conv_bn(4 * width, 4 * width))
        self.out_channels = [2 * width, 4 * width]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        c2 = self.layer1(self.conv1(x))
        return [c2, self.layer2(c2)]


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
        anchors = grid_anchors(p["data"]["image_size"], p["strides"], sizes, p["anchor_ratios"])
        self.register_buffer("anchors", torch.cat(anchors))
        self.box_coder = BoxCoder()
        num_anchors = len(p["anchor_scales"]) * len(p["anchor_ratios"])
        classes = len(SHAPES)
        self.backbone = Backbone(Body(p["width"]), p["fpn_channels"])
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
        counted = matched != BETWEEN_THRESHOLDS
        cls_loss = sigmoid_focal_loss(logits[counted], targets[counted], 0.25, 2.0, reduction="sum")
        anchors = self.anchors.expand_as(gt_boxes)
        box_loss = F.l1_loss(deltas[fg], self.box_coder.encode(anchors[fg], gt_boxes[fg]), reduction="sum")
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
            boxes = self.box_coder.decode(self.anchors[anchor], dl[anchor]).clamp(0, size)
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
    grad_clip_norm = None

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        self.device, self.seed = device, seed
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
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=params["lr"], weight_decay=0.0, foreach=True)
        warmup, factor = self.steps_per_epoch * params["warmup_epochs"], params["warmup_factor"]
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: factor + (1 - factor) * s / warmup if s < warmup else 1.0
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

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        return shuffled_batches(len(self.x), self.batch, epoch_generator(self.seed, epoch), self.device)

    def loss(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model.loss(self._images(self.x[idx]), self.boxes[idx], self.labels[idx])

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        detections = []
        for start in range(0, len(self.ex), 256):
            results = self.model.detect(self._images(self.ex[start : start + 256]))
            for j, (boxes, scores, cats) in enumerate(results):
                detections += to_coco(start + j, boxes, scores, cats)
        return coco_map(self.coco_gt, detections)
