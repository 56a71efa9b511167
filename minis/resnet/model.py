"""Mini ResNet-50 v1.5: image classification on generated images, trained to a top-1 target.

The network keeps ResNet-50 v1.5's shape (a stem, four stages of bottleneck blocks with the stride
on the 3x3 convolution, as in v1.5, global average pooling, one linear classifier) with its width
and depth scaled down by the config. The data are small RGB images of ``classes`` generated
patterns: each class is a smooth random prototype that every sample shows shifted, rescaled in
contrast and covered in noise, so a convolutional network must learn translation-tolerant features.
Hyperparameters are logged under the closed SGD recipe's keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlrepro.training.epoch_order import epoch_generator, shuffled_batches


# ---------------------------------------------------------------------------------------- data
def _prototypes(rng: np.random.Generator, classes: int, size: int) -> np.ndarray:
    """One smooth 3-channel pattern per class: a few random low-frequency waves."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    protos = np.zeros((classes, 3, size, size), dtype=np.float32)
    for k in range(classes):
        for ch in range(3):
            for _ in range(3):
                fy, fx = rng.integers(1, 4, size=2)
                phase = rng.uniform(0, 2 * math.pi)
                protos[k, ch] += np.sin(2 * math.pi * (fy * yy + fx * xx) + phase)
    return protos / 3.0


def _samples(rng: np.random.Generator, protos: np.ndarray, n: int, noise: float):
    classes, _, size, _ = protos.shape
    labels = rng.integers(0, classes, size=n)
    images = np.empty((n, 3, size, size), dtype=np.float32)
    shifts = rng.integers(-size // 6, size // 6 + 1, size=(n, 2))
    contrast = rng.uniform(0.6, 1.4, size=n).astype(np.float32)
    for i in range(n):
        img = np.roll(protos[labels[i]], tuple(shifts[i]), axis=(1, 2))
        images[i] = contrast[i] * img + noise * rng.standard_normal(img.shape, dtype=np.float32)
    return images, labels.astype(np.int64)


def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    d = params["data"]
    rng = np.random.default_rng(seed)
    protos = _prototypes(rng, d["classes"], d["image_size"])
    for split, n in (("train", d["train_samples"]), ("eval", d["eval_samples"])):
        images, labels = _samples(rng, protos, n, d["noise"])
        np.savez(out_dir / f"{split}.npz", images=images, labels=labels)


# --------------------------------------------------------------------------------------- model
class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carries the stride: the "v1.5" change), 1x1 expand; projection shortcut."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        nn.init.zeros_(self.bn3.weight)  # each residual block starts as the identity
        self.shortcut = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, classes: int, width: int, blocks: list[int]) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        stages, in_ch = [], width
        for i, n in enumerate(blocks):
            stage_width = width * 2**i
            for j in range(n):
                stages.append(Bottleneck(in_ch, stage_width, stride=2 if (j == 0 and i > 0) else 1))
                in_ch = stage_width * Bottleneck.expansion
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(in_ch, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ------------------------------------------------------------------------------------ workload
class Workload:
    higher_is_better = True
    grad_clip_norm = None

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        self.device, self.seed = device, seed
        self.p = params
        train, evals = np.load(data_dir / "train.npz"), np.load(data_dir / "eval.npz")
        self.x = torch.from_numpy(train["images"]).to(device)
        self.y = torch.from_numpy(train["labels"]).to(device)
        self.ex = torch.from_numpy(evals["images"]).to(device)
        self.ey = torch.from_numpy(evals["labels"]).to(device)
        self.model = ResNet(params["data"]["classes"], params["width"], params["blocks"]).to(device)
        self.batch = params["batch_size"]
        self.steps_per_epoch = math.ceil(len(self.x) / self.batch)
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=params["lr"], momentum=params["momentum"],
            weight_decay=params["weight_decay"], nesterov=False,
        )
        total = self.steps_per_epoch * params["max_epochs"]
        warmup = self.steps_per_epoch * params["warmup_epochs"]
        # MLPerf's SGD recipe: linear warmup, then polynomial (power 2) decay to end_lr.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: (s + 1) / warmup if s < warmup else
            max(params["end_lr"] / params["lr"], (1 - (s - warmup) / max(1, total - warmup)) ** 2),
        )
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "opt_name": "sgd",
            "sgd_opt_base_learning_rate": params["lr"],
            "sgd_opt_end_learning_rate": params["end_lr"],
            "sgd_opt_learning_rate_decay_poly_power": 2,
            "sgd_opt_learning_rate_decay_steps": total - warmup,
            "sgd_opt_weight_decay": params["weight_decay"],
            "sgd_opt_momentum": params["momentum"],
            "model_bn_span": self.batch,
            "opt_learning_rate_warmup_epochs": params["warmup_epochs"],
        }
        self.train_samples = len(self.x)
        self.eval_samples = len(self.ex)

    def initialized_tensors(self) -> list[str]:
        return [name for name, _ in self.model.named_parameters()]

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        gen = epoch_generator(self.seed, epoch)
        for idx in shuffled_batches(len(self.x), self.batch, gen, self.device):
            yield self.x[idx], self.y[idx]

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.model(x), y, label_smoothing=0.1)

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        correct = 0
        for i in range(0, len(self.ex), 512):
            correct += (self.model(self.ex[i : i + 512]).argmax(1) == self.ey[i : i + 512]).sum().item()
        return correct / len(self.ex)
