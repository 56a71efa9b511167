"""Mini Mask R-CNN (MLPerf Training 2.0 "maskrcnn"): two-stage instance segmentation on generated scenes.

The real benchmark trains Mask R-CNN (ResNet-50 + FPN) on COCO and stops at box AP 0.377 and mask AP
0.339. This mini version keeps every stage of that model and shrinks the sizes:

- data: 32x32 RGB images with a few filled rectangles, discs and triangles (random size, aspect and
  colour, so the class is the *shape*) on a noisy background, each with its pixel mask and box;
- backbone: a small strided conv net and an FPN with four levels (strides 2, 4, 8, 16), one anchor
  size per level as in the reference;
- region proposal network: a 3x3 conv shared by all levels, objectness and box-delta 1x1 convs,
  anchors matched by IoU (>= 0.7 object, < 0.3 background), a balanced sample of anchors per image
  for the loss, and decode + NMS to turn the best anchors into proposals;
- RoI heads: RoI Align (torchvision's, ``aligned=True``) on the pyramid level that suits
  each RoI's size; a box head (two fully connected layers, then class scores and class-specific box
  deltas) trained on a 1:3 sample of object and background proposals; a mask head (four 3x3 convs,
  a 2x transposed conv, one mask logit map per class) trained on the object proposals against the
  ground-truth mask cropped to each proposal;
- evaluation: score threshold, per-class NMS, masks pasted back into the image, and COCO box AP and
  mask AP (mAP@[.5:.95], pycocotools ``bbox`` and ``segm``), the two metrics of the real benchmark.

The box geometry (IoU, NMS, box coding, anchors, matching, RoI Align) is shared with the ssd model:
``mlrepro.training.detection``, written to torchvision.ops' semantics; so are the scenes
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
import pycocotools.mask as mask_util
import torch
import torch.nn.functional as F
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torch import nn

from mlrepro.training.detection import (
    BELOW_LOW_THRESHOLD,
    BoxCoder,
    batched_nms,
    box_iou,
    grid_anchors,
    match,
    multiscale_roi_align,
    nms,
    roi_align,
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
        images, masks, boxes, labels = (np.stack(x) for x in zip(*scenes, strict=True))
        np.savez(out_dir / f"{split}.npz", images=images, masks=masks, boxes=boxes, labels=labels)


# ------------------------------------------------------------------------- box weights, sampling
# The box head predicts deltas scaled up by these (the reference's 10, 10, 5, 5): proposals are
# already close to the objects, so their residuals are small and would otherwise learn slowly.
BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)


def sample(positive: torch.Tensor, negative: torch.Tensor, size: int, fraction: float,
           generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``torchvision.models.detection._utils.BalancedPositiveNegativeSampler``, batched: per row (image),
    a random ``size`` of the candidates, at most ``fraction`` of them positive: the balanced minibatch
    that keeps the easy background from swamping the loss. (B, N) masks in, (B, N) masks of the chosen
    positives and negatives out."""

    def random_rank(candidates: torch.Tensor) -> torch.Tensor:
        # Drawn on the host from the run's generator: the same seed samples the same on every device.
        keys = torch.rand(candidates.shape, generator=generator).to(candidates.device) + (~candidates).float()
        return keys.argsort(dim=1).argsort(dim=1)  # candidates first, in random order

    pos = positive & (random_rank(positive) < int(size * fraction))
    neg = negative & (random_rank(negative) < size - pos.sum(dim=1, keepdim=True))
    return pos, neg


# ------------------------------------------------------------------------------------- masks
def paste_masks(masks: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """(D, M, M) mask probabilities predicted inside boxes -> (D, size, size) binary image masks."""
    centres = torch.arange(size, device=boxes.device, dtype=boxes.dtype) + 0.5
    gx = 2 * (centres - boxes[:, 0:1]) / (boxes[:, 2:3] - boxes[:, 0:1]).clamp(min=1e-6) - 1  # (D, size)
    gy = 2 * (centres - boxes[:, 1:2]) / (boxes[:, 3:4] - boxes[:, 1:2]).clamp(min=1e-6) - 1
    d = len(boxes)
    grid = torch.stack((gx[:, None, :].expand(d, size, size), gy[:, :, None].expand(d, size, size)), -1)
    pasted = F.grid_sample(masks[:, None], grid, mode="bilinear", padding_mode="border",
                           align_corners=False)[:, 0]
    inside = (grid.abs() <= 1).all(dim=-1)
    return (pasted >= 0.5) & inside


# --------------------------------------------------------------------------------------- model
class Body(nn.Module):
    """The backbone proper: four strided stages, C1..C4 at strides 2, 4, 8, 16 (ResNet's C2..C5)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.layer1 = conv_bn(3, width, 2)
        self.layer2 = nn.Sequential(conv_bn(width, 2 * width, 2), conv_bn(2 * width, 2 * width))
        self.layer3 = conv_bn(2 * width, 4 * width, 2)
        self.layer4 = conv_bn(4 * width, 4 * width, 2)
        self.out_channels = [width, 2 * width, 4 * width, 4 * width]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        c1 = self.layer1(x)
        c2 = self.layer2(c1)
        c3 = self.layer3(c2)
        return [c1, c2, c3, self.layer4(c3)]


class RPNHead(nn.Module):
    def __init__(self, ch: int, anchors: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)
        self.cls_logits = nn.Conv2d(ch, anchors, 1)
        self.bbox_pred = nn.Conv2d(ch, anchors * 4, 1)
        for m in (self.conv, self.cls_logits, self.bbox_pred):
            nn.init.normal_(m.weight, std=0.01)
            nn.init.zeros_(m.bias)

    def forward(self, feats: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per level: objectness logits (B, H*W*A) and deltas (B, H*W*A, 4), in the anchors' order."""
        logits, deltas = [], []
        for f in feats:
            t = F.relu(self.conv(f))
            logits.append(self.cls_logits(t).permute(0, 2, 3, 1).reshape(len(f), -1))
            deltas.append(self.bbox_pred(t).permute(0, 2, 3, 1).reshape(len(f), -1, 4))
        return logits, deltas


class BoxHead(nn.Module):
    """Two fully connected layers on the pooled RoI, then class scores and per-class box deltas."""

    def __init__(self, ch: int, pool: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc6 = nn.Linear(ch * pool * pool, hidden)
        self.fc7 = nn.Linear(hidden, hidden)
        self.cls_score = nn.Linear(hidden, classes + 1)  # + background
        self.bbox_pred = nn.Linear(hidden, (classes + 1) * 4)
        for m in (self.fc6, self.fc7):
            nn.init.kaiming_uniform_(m.weight, a=1)
            nn.init.zeros_(m.bias)
        nn.init.normal_(self.cls_score.weight, std=0.01)
        nn.init.normal_(self.bbox_pred.weight, std=0.001)
        nn.init.zeros_(self.cls_score.bias)
        nn.init.zeros_(self.bbox_pred.bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.fc7(F.relu(self.fc6(x.flatten(1)))))
        return self.cls_score(x), self.bbox_pred(x).view(len(x), self.cls_score.out_features, 4)


class MaskHead(nn.Module):
    """A small FCN: four 3x3 convs, a 2x transposed conv, then one mask logit map per class."""

    def __init__(self, in_ch: int, ch: int, classes: int) -> None:
        super().__init__()
        self.fcn = nn.ModuleList(nn.Conv2d(in_ch if i == 0 else ch, ch, 3, padding=1) for i in range(4))
        self.conv5_mask = nn.ConvTranspose2d(ch, ch, 2, stride=2)
        self.mask_fcn_logits = nn.Conv2d(ch, classes, 1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.ConvTranspose2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.fcn:
            x = F.relu(conv(x))
        return self.mask_fcn_logits(F.relu(self.conv5_mask(x)))


# The 21 tensors the closed rules check, and the layers of this model they name.
MLPERF_TENSORS = {
    **{f"FPN_inner_block{i + 1}": f"backbone.fpn.inner_blocks.{i}" for i in range(4)},
    **{f"FPN_layer_block{i + 1}": f"backbone.fpn.layer_blocks.{i}" for i in range(4)},
    "RPNHead_conv": "rpn.conv",
    "RPNHead_cls": "rpn.cls_logits",
    "RPNHead_bbox": "rpn.bbox_pred",
    "ROI_BOX_FEATURE_EXTRACTOR_fc6": "box_head.fc6",
    "ROI_BOX_FEATURE_EXTRACTOR_fc7": "box_head.fc7",
    "ROI_BOX_PREDICTOR_cls": "box_head.cls_score",
    "ROI_BOX_PREDICTOR_bbox": "box_head.bbox_pred",
    **{f"ROI_MASK_FEATURE_EXTRACTOR_fcn{i + 1}": f"mask_head.fcn.{i}" for i in range(4)},
    "ROI_MASK_PREDICTOR_fcn5": "mask_head.conv5_mask",
    "ROI_MASK_PREDICTOR_fcn_logits": "mask_head.mask_fcn_logits",
}

Detections = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]


class MaskRCNN(nn.Module):
    def __init__(self, p: dict[str, Any]) -> None:
        super().__init__()
        self.p = p
        self.size = p["data"]["image_size"]
        self.strides = p["strides"]
        # One anchor size per level (the FPN recipe).
        anchors = grid_anchors(self.size, self.strides, [[s] for s in p["anchor_sizes"]], p["anchor_ratios"])
        self.level_lengths = [len(a) for a in anchors]
        self.register_buffer("anchors", torch.cat(anchors))
        self.rpn_coder, self.box_coder = BoxCoder(), BoxCoder(BOX_WEIGHTS)
        ch, classes = p["fpn_channels"], len(SHAPES)
        self.backbone = Backbone(Body(p["width"]), ch)
        self.rpn = RPNHead(ch, len(p["anchor_ratios"]))
        self.box_head = BoxHead(ch, p["box_pool"], p["box_hidden"], classes)
        self.mask_head = MaskHead(ch, p["mask_channels"], classes)
        # A box of canonical_roi_size pixels is pooled from level 2 (stride 4): 4 cells per side.
        self.canonical = (float(p["canonical_roi_size"]), 2)

    # -- region proposal network
    def propose(self, logits: list[torch.Tensor], deltas: list[torch.Tensor], top_n: int):
        """Per image: the best ``pre_nms_top_n`` anchors of each level, decoded, clipped, NMS'd."""
        boxes, scores = [], []
        for lg, dl, anc in zip(logits, deltas, self.anchors.split(self.level_lengths), strict=True):
            s, idx = lg.detach().topk(min(self.p["pre_nms_top_n"], len(anc)), dim=1)  # (B, k)
            d = torch.gather(dl.detach(), 1, idx[..., None].expand(-1, -1, 4))
            boxes.append(self.rpn_coder.decode(anc[idx], d).clamp(0, self.size))
            scores.append(s)
        out = []
        for bx, sc in zip(torch.cat(boxes, 1), torch.cat(scores, 1), strict=True):
            big = ((bx[:, 2:] - bx[:, :2]) >= 1).all(dim=1)
            bx, sc = bx[big], sc[big]
            out.append(bx[nms(bx, sc, self.p["rpn_nms_threshold"])[:top_n]])
        return out

    def rpn_loss(self, logits: torch.Tensor, deltas: torch.Tensor, boxes: torch.Tensor,
                 valid: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        matched = match(self.anchors, boxes, valid, 0.7, 0.3)  # (B, A)
        pos, neg = sample(matched >= 0, matched == BELOW_LOW_THRESHOLD, self.p["rpn_batch_per_image"], 0.5,
                          generator)
        chosen = pos | neg
        cls_loss = F.binary_cross_entropy_with_logits(logits[chosen], pos[chosen].to(logits.dtype),
                                                      reduction="sum")
        gt = torch.gather(boxes, 1, matched.clamp(min=0)[..., None].expand(-1, -1, 4))  # (B, A, 4)
        anchors = self.anchors.expand_as(gt)
        box_loss = F.smooth_l1_loss(deltas[pos], self.rpn_coder.encode(anchors[pos], gt[pos]), beta=1 / 9,
                                    reduction="sum")
        return (cls_loss + box_loss) / chosen.sum().clamp(min=1)

    # -- RoI heads
    def roi_features(self, feats: list[torch.Tensor], rois: torch.Tensor, batch_idx: torch.Tensor, out: int):
        boxes = torch.cat((batch_idx[:, None].to(rois.dtype), rois), dim=1)  # torchvision's (K, 5) RoIs
        return multiscale_roi_align(feats, self.strides, boxes, out, self.canonical)

    def loss(self, images: torch.Tensor, masks: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor,
             generator: torch.Generator) -> torch.Tensor:
        p = self.p
        feats = self.backbone(images)
        logits, deltas = self.rpn(feats)
        valid = labels > 0
        loss = self.rpn_loss(torch.cat(logits, 1), torch.cat(deltas, 1), boxes, valid, generator)

        # Sample RoIs among the proposals, with the ground-truth boxes added so that the heads see
        # good positives from the first step on.
        proposals = self.propose(logits, deltas, p["rpn_post_nms_top_n_train"])
        props = torch.cat((nn.utils.rnn.pad_sequence(proposals, batch_first=True), boxes), dim=1)
        lengths = torch.tensor([len(x) for x in proposals], device=boxes.device)
        real = torch.arange(props.shape[1] - boxes.shape[1], device=boxes.device) < lengths[:, None]
        real = torch.cat((real, valid), dim=1)  # (B, P): not padding
        iou = box_iou(props, boxes).masked_fill(~valid[:, None, :], -1.0)  # (B, P, G)
        best, gi = iou.max(dim=2)
        pos, neg = sample(real & (best >= 0.5), real & (best < 0.5), p["roi_batch_per_image"], 0.25, generator)
        bidx, pidx = torch.nonzero(pos | neg, as_tuple=True)
        rois, gt_idx = props[bidx, pidx], gi[bidx, pidx]
        roi_labels = labels[bidx, gt_idx] * pos[bidx, pidx]  # background: 0
        cls, box_deltas = self.box_head(self.roi_features(feats, rois, bidx, p["box_pool"]))
        loss = loss + F.cross_entropy(cls, roi_labels)
        fg = torch.nonzero(roi_labels > 0).squeeze(1)
        targets = self.box_coder.encode(rois[fg], boxes[bidx[fg], gt_idx[fg]])
        loss = loss + F.smooth_l1_loss(box_deltas[fg, roi_labels[fg]], targets, beta=1.0,
                                       reduction="sum") / len(roi_labels)

        # The mask head learns only on the object RoIs, and only the mask of the RoI's own class:
        # mask and class are decoupled (a sigmoid per class, not a softmax across classes).
        # The targets: each ground-truth mask cropped to its proposal and resampled to the mask size.
        mask_logits = self.mask_head(self.roi_features(feats, rois[fg], bidx[fg], p["mask_pool"]))
        gt_masks = masks.flatten(0, 1)[:, None].to(images.dtype)  # (B * G, 1, S, S)
        which = bidx[fg] * masks.shape[1] + gt_idx[fg]
        crops = torch.cat((which[:, None].to(rois.dtype), rois[fg]), dim=1)
        mask_targets = roi_align(gt_masks, crops, 2 * p["mask_pool"])[:, 0] >= 0.5
        mask_logits = mask_logits[torch.arange(len(fg), device=fg.device), roi_labels[fg] - 1]
        return loss + F.binary_cross_entropy_with_logits(mask_logits, mask_targets.to(images.dtype))

    @torch.no_grad()
    def detect(self, images: torch.Tensor) -> Detections:
        """(boxes, scores, category ids, binary masks) per image, best first."""
        p = self.p
        feats = self.backbone(images)
        proposals = self.propose(*self.rpn(feats), p["rpn_post_nms_top_n_test"])
        bidx = torch.cat([torch.full((len(r),), b, device=images.device) for b, r in enumerate(proposals)])
        rois = torch.cat(proposals)
        cls, deltas = self.box_head(self.roi_features(feats, rois, bidx, p["box_pool"]))
        scores = F.softmax(cls, dim=1)[:, 1:]  # (R, K)
        boxes = self.box_coder.decode(rois[:, None, :], deltas[:, 1:]).clamp(0, self.size)  # (R, K, 4)
        det_boxes, det_scores, det_cats, det_b = [], [], [], []
        for b in range(len(images)):
            s, bx = scores[bidx == b].flatten(), boxes[bidx == b].reshape(-1, 4)
            cat = torch.arange(scores.shape[1], device=s.device).repeat(len(s) // scores.shape[1])
            keep = torch.nonzero((s > p["score_threshold"]) & ((bx[:, 2:] - bx[:, :2]) >= 1).all(1)).squeeze(1)
            kept = keep[batched_nms(bx[keep], s[keep], cat[keep], p["nms_threshold"])]
            kept = kept[: p["detections_per_image"]]
            det_boxes.append(bx[kept])
            det_scores.append(s[kept])
            det_cats.append(cat[kept] + 1)
            det_b.append(torch.full((len(kept),), b, device=s.device))
        all_boxes, all_cats, all_b = torch.cat(det_boxes), torch.cat(det_cats), torch.cat(det_b)
        mask_logits = self.mask_head(self.roi_features(feats, all_boxes, all_b, p["mask_pool"]))
        probs = torch.sigmoid(mask_logits[torch.arange(len(all_cats), device=all_cats.device), all_cats - 1])
        all_masks = paste_masks(probs, all_boxes, self.size).split([len(x) for x in det_boxes])
        return list(zip(det_boxes, det_scores, det_cats, all_masks, strict=True))


# ---------------------------------------------------------------------------------- evaluation
def rle(mask: np.ndarray) -> dict[str, Any]:
    return mask_util.encode(np.asfortranarray(mask.astype(np.uint8)))


def coco_ground_truth(masks: np.ndarray, boxes: np.ndarray, labels: np.ndarray) -> COCO:
    images, anns = [], []
    size = masks.shape[-1]
    for i in range(len(labels)):
        images.append({"id": i, "width": size, "height": size})
        for m, b, lab in zip(masks[i], boxes[i], labels[i], strict=True):
            if lab > 0:
                x0, y0, x1, y1 = (float(v) for v in b)
                anns.append({
                    "id": len(anns) + 1, "image_id": i, "category_id": int(lab), "iscrowd": 0,
                    "bbox": [x0, y0, x1 - x0, y1 - y0], "area": float(m.sum()), "segmentation": rle(m),
                })
    coco = COCO()
    coco.dataset = {
        "images": images, "annotations": anns,
        "categories": [{"id": k + 1, "name": n} for k, n in enumerate(SHAPES)],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def coco_ap(gt: COCO, detections: list[dict[str, Any]]) -> dict[str, float]:
    """COCO box and mask mAP@[.5:.95] of detections ({"image_id", "category_id", "score", "bbox":
    [x, y, w, h], "segmentation": RLE})."""
    if not detections:
        return {"BBOX": 0.0, "SEGM": 0.0}  # loadRes refuses an empty list
    result = {}
    with contextlib.redirect_stdout(io.StringIO()):
        dt = gt.loadRes(detections)
        for key, iou_type in (("BBOX", "bbox"), ("SEGM", "segm")):
            ev = COCOeval(gt, dt, iou_type)
            # Every object here is "small" by COCO's definition (< 32**2 pixels): evaluating only
            # the "all" area range gives the same mAP for a quarter of the time.
            ev.params.areaRng, ev.params.areaRngLbl = [[0, 1e10]], ["all"]
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
            result[key] = max(0.0, float(ev.stats[0]))
    return result


def to_coco(image_id: int, boxes: torch.Tensor, scores: torch.Tensor, cats: torch.Tensor,
            masks: torch.Tensor) -> list[dict[str, Any]]:
    out = []
    for b, s, c, m in zip(boxes.tolist(), scores.tolist(), cats.tolist(), masks.cpu().numpy(), strict=True):
        out.append({
            "image_id": image_id, "category_id": c, "score": s,
            "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]], "segmentation": rle(m),
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
        self.masks = torch.from_numpy(train["masks"]).to(device)
        self.boxes = torch.from_numpy(train["boxes"]).to(device)
        self.labels = torch.from_numpy(train["labels"]).to(device)
        self.ex = torch.from_numpy(evals["images"]).to(device)
        self.coco_gt = coco_ground_truth(evals["masks"], evals["boxes"], evals["labels"])
        self.model = MaskRCNN(params).to(device)
        self.sampling = torch.Generator().manual_seed(seed)  # the RPN's and RoI heads' training samples
        self.batch = params["batch_size"]
        self.steps_per_epoch = math.ceil(len(self.x) / self.batch)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=params["lr"], momentum=0.9,
                                   weight_decay=params["weight_decay"], foreach=True)
        # The reference schedule: linear warmup from warmup_factor * lr, then x0.1 at two steps.
        warmup, factor = params["warmup_steps"], params["warmup_factor"]
        decay_steps = [e * self.steps_per_epoch for e in params["lr_decay_epochs"]]
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: (factor + (1 - factor) * s / warmup if s < warmup else 1.0)
            * 0.1 ** sum(s >= d for d in decay_steps),
        )
        size = params["data"]["image_size"]
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "opt_base_learning_rate": params["lr"],
            "opt_learning_rate_warmup_steps": warmup,
            "opt_learning_rate_warmup_factor": factor,
            "num_image_candidates": params["rpn_post_nms_top_n_train"],
            "opt_learning_rate_decay_factor": 0.1,
            "opt_learning_rate_decay_steps": decay_steps,
            "min_image_size": size,
            "max_image_size": size,
        }
        self.train_samples = len(self.x)
        self.eval_samples = len(self.ex)

    def initialized_tensors(self) -> list[str]:
        for layer in MLPERF_TENSORS.values():
            self.model.get_submodule(layer)  # fails loudly if a name no longer matches the model
        return list(MLPERF_TENSORS)

    def _images(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() / 255 - 0.5

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        return shuffled_batches(len(self.x), self.batch, epoch_generator(self.seed, epoch), self.device)

    def loss(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model.loss(self._images(self.x[idx]), self.masks[idx], self.boxes[idx], self.labels[idx],
                               self.sampling)

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict[str, float]:
        self.model.eval()
        detections = []
        for start in range(0, len(self.ex), 256):
            for j, det in enumerate(self.model.detect(self._images(self.ex[start : start + 256]))):
                detections += to_coco(start + j, *det)
        return coco_ap(self.coco_gt, detections)
