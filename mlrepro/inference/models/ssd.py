"""SSD (ssd-resnet34 at v2.0): the mini RetinaNet's detections, logged as accuracy-coco.py reads them: per
detection seven float32 (image index, ymin, xmin, ymax, xmax as fractions of the image, score, class); mAP by
pycocotools over the detections LoadGen logged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlrepro.inference.models import checkpointed


class SSDServed:
    metric = "COCO mAP@[.5:.95] (%)"

    def __init__(self, data_dir: Path, params: dict[str, Any], checkpoint: Path, device: torch.device) -> None:
        self.module, self.workload = checkpointed("ssd", data_dir, params, checkpoint, device)
        self.size = float(params["data"]["image_size"])  # a power of two: fractions of it are exact in float32
        self.count = len(self.workload.ex)

    @torch.inference_mode()
    def predict(self, indices: np.ndarray) -> list[np.ndarray]:
        w = self.workload
        out = []
        for i, (boxes, scores, cats) in zip(indices, w.model.detect(w._images(w.ex[torch.from_numpy(indices)])),
                                            strict=True):
            b = boxes.float().cpu().numpy() / self.size  # x0, y0, x1, y1
            rows = np.column_stack([np.full(len(b), i), b[:, 1], b[:, 0], b[:, 3], b[:, 2],
                                    scores.float().cpu().numpy(), cats.cpu().numpy()])
            out.append(rows.astype(np.float32).ravel())
        return out

    def accuracy(self, responses: dict[int, bytes]) -> float:
        detections = []
        for data in responses.values():
            for idx, ymin, xmin, ymax, xmax, score, cat in np.frombuffer(data, dtype=np.float32).reshape(-1, 7):
                detections.append({"image_id": int(idx), "category_id": int(cat), "score": float(score),
                                   "bbox": [float(xmin * self.size), float(ymin * self.size),
                                            float((xmax - xmin) * self.size), float((ymax - ymin) * self.size)]})
        return 100.0 * self.module.coco_map(self.workload.coco_gt, detections)

    def reference(self) -> float:
        return 100.0 * self.workload.evaluate(0)

    @staticmethod
    def accuracy_line(value: float) -> str:
        return f"mAP={value:.3f}%"
