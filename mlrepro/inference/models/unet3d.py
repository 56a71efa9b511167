"""3D U-Net (3d-unet-99): the argmax segmentation of each volume as uint8 voxels (as accuracy_kits.py reads
the masks); the mean Dice of kidney and tumour over the volumes LoadGen logged, as a fraction (the round's
DICE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlrepro.inference.models import checkpointed


class UNet3DServed:
    metric = "mean Dice of kidney and tumour"

    def __init__(self, data_dir: Path, params: dict[str, Any], checkpoint: Path, device: torch.device) -> None:
        self.module, self.workload = checkpointed("unet3d", data_dir, params, checkpoint, device)
        self.labels = self.workload.ey.long()
        self.count = len(self.labels)

    @torch.inference_mode()
    def predict(self, indices: np.ndarray) -> np.ndarray:
        w = self.workload
        pred = w.model(w.ex[torch.from_numpy(indices)]).argmax(dim=1)
        return pred.to(torch.uint8).cpu().numpy().reshape(len(indices), -1)

    def _dice(self, responses: dict[int, bytes]) -> torch.Tensor:
        """(volumes, kidney and tumour) Dice of the logged masks."""
        indices = sorted(responses)
        labels = self.labels[torch.tensor(indices, dtype=torch.long)]
        pred = torch.from_numpy(np.stack([np.frombuffer(responses[i], dtype=np.uint8) for i in indices]))
        pred = pred.reshape(labels.shape).to(device=labels.device, dtype=torch.long)
        return self.module.dice_per_class(self.module.one_hot(pred), self.module.one_hot(labels))[:, 1:]

    def accuracy(self, responses: dict[int, bytes]) -> float:
        return float(self._dice(responses).mean())

    def reference(self) -> float:
        return float(self.workload.evaluate(0))

    @staticmethod
    def accuracy_line(value: float) -> str:
        return f"Accuracy: mean = {value:.5f}"
