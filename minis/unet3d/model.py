"""Mini 3D U-Net: kidney and tumour segmentation of generated volumes, trained to a mean-Dice target.

The real benchmark segments kidneys and kidney tumours in KiTS19 CT scans with a 3D U-Net and is
scored by the mean Dice of the two foreground classes. This mini workload keeps that task at toy
size:

- the data are small cubic volumes, each with an ellipsoid "kidney" of random size, shape and
  position, holding a smaller spherical "tumour". Their intensities overlap the background's
  once the noise and a smooth intensity bias are added, so a voxel alone does not tell its class:
  the network must use the neighbourhood and the shapes, as on CT;
- the network has the reference's layout with fewer levels and channels: an input block and
  downsampling blocks (each two 3x3x3 convolutions + instance norm + leaky ReLU, the first of a
  level with stride 2), then upsampling blocks (a transposed convolution, concatenation with the
  skip connection of the same resolution, two more convolution blocks) and a 1x1x1 output
  convolution over the classes. Layer names follow the closed rules' list;
- the loss is the reference's Dice + cross-entropy on the softmax output, the optimizer SGD with
  Nesterov momentum (after an optional linear warmup), with random flips as augmentation;
- the metric is the mean Dice of kidney and tumour on held-out volumes (higher is better).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlrepro.training.epoch_order import epoch_generator, shuffled_batches

CLASSES = 3  # background, kidney, tumour


# ---------------------------------------------------------------------------------------- data
def _volume(rng: np.random.Generator, d: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    s = d["size"]
    grid = np.stack(np.mgrid[0:s, 0:s, 0:s], axis=-1).astype(np.float32)  # (s, s, s, 3) coordinates
    label = np.zeros((s, s, s), dtype=np.int64)
    # The kidney: an ellipsoid with random radii, axis-aligned, centred away from the borders.
    radii = rng.uniform(0.18, 0.32, size=3) * s
    centre = rng.uniform(radii + 1, s - radii - 1)
    kidney = (((grid - centre) / radii) ** 2).sum(-1) <= 1
    label[kidney] = 1
    # The tumour: a smaller ball centred inside the kidney; it may bulge out of it. Every volume has
    # one, as KiTS19's cases do (and so Dice never scores an empty class).
    inside = np.argwhere(kidney)
    t_centre = inside[rng.integers(len(inside))]
    t_radius = rng.uniform(0.12, 0.2) * s
    label[((grid - t_centre) ** 2).sum(-1) <= t_radius**2] = 2
    # Tissue intensities, plus a smooth bias across the volume (like CT's uneven contrast) and noise.
    image = np.array([0.0, 1.0, 2.0], dtype=np.float32)[label]
    bias = (grid / s - 0.5) @ rng.uniform(-d["bias"], d["bias"], size=3).astype(np.float32)
    image += bias + d["noise"] * rng.standard_normal(image.shape, dtype=np.float32)
    return image[None], label  # a channel axis, as the network takes it


def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    d = params["data"]
    rng = np.random.default_rng(seed)
    for split, n in (("train", d["train_samples"]), ("eval", d["eval_samples"])):
        images, labels = zip(*(_volume(rng, d) for _ in range(n)), strict=True)
        np.savez(out_dir / f"{split}.npz", images=np.stack(images), labels=np.stack(labels))


# --------------------------------------------------------------------------------------- model
class ConvBlock(nn.Sequential):
    """3x3x3 convolution, instance norm, leaky ReLU: the reference's unit of every level."""

    def __init__(self, in_ch: int, out_ch: int, stride: int = 1) -> None:
        super().__init__()
        # No bias: the instance norm right after removes any per-channel constant anyway.
        self.conv = nn.Conv3d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.instancenorm = nn.InstanceNorm3d(out_ch, affine=True)
        self.act = nn.LeakyReLU(0.01)


class Level(nn.Sequential):
    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.block_0 = ConvBlock(in_ch, out_ch, stride)
        self.block_1 = ConvBlock(out_ch, out_ch)


class Up(nn.Module):
    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.deconv = nn.ConvTranspose3d(in_ch, out_ch, 2, stride=2)
        self.block_0 = ConvBlock(2 * out_ch, out_ch)  # upsampled and skip features, concatenated
        self.block_1 = ConvBlock(out_ch, out_ch)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.block_1(self.block_0(torch.cat([self.deconv(x), skip], dim=1)))


class UNet3D(nn.Module):
    def __init__(self, filters: list[int]) -> None:
        super().__init__()
        self.input_block = Level(1, filters[0], stride=1)
        # Each down level halves the resolution (stride 2 in its first convolution).
        self.down = nn.ModuleList(Level(a, b, stride=2) for a, b in itertools.pairwise(filters))
        self.up = nn.ModuleList(Up(b, a) for a, b in reversed(list(itertools.pairwise(filters))))
        self.output_conv = nn.Conv3d(filters[0], CLASSES, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.input_block(x)]
        for level in self.down:
            skips.append(level(skips[-1]))
        x = skips.pop()
        for level in self.up:
            x = level(x, skips.pop())
        return self.output_conv(x)  # logits; the softmax is in the loss and the argmax in evaluation

    def layer_names(self) -> list[str]:
        """The rules' names: input_block_0_conv, down0_block_1_instancenorm, up1_deconv, output_conv."""
        names = []
        for name, module in self.named_modules():
            if isinstance(module, nn.Conv3d | nn.ConvTranspose3d | nn.InstanceNorm3d):
                # "down.0.block_1.conv" -> "down0_block_1_conv"; "input_block.block_0.conv" -> "input_block_0_conv"
                name = name.replace("input_block.block_", "input_block_")
                names.append(name.replace("down.", "down").replace("up.", "up").replace(".", "_"))
        return names


def one_hot(labels: torch.Tensor) -> torch.Tensor:
    """(batch, *spatial) class indices -> (batch, classes, *spatial) indicator maps."""
    return F.one_hot(labels, CLASSES).movedim(-1, 1).float()


def dice_per_class(probs: torch.Tensor, onehot: torch.Tensor, smooth: float = 1e-6) -> torch.Tensor:
    """Soft Dice 2|P.G| / (|P| + |G|) per (sample, class); an empty class predicted empty scores 1."""
    dims = tuple(range(2, probs.dim()))
    inter = (probs * onehot).sum(dims)
    total = probs.sum(dims) + onehot.sum(dims)
    return (2 * inter + smooth) / (total + smooth)


def dice_ce_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The reference's loss: mean of (1 - Dice) over the foreground classes, averaged with cross-entropy.

    Dice counts each class as a whole, so the small tumour weighs as much as the large background
    would; cross-entropy gives every voxel a gradient from the start.
    """
    dice = dice_per_class(logits.softmax(dim=1), one_hot(labels))[:, 1:]
    return ((1 - dice).mean() + F.cross_entropy(logits, labels)) / 2


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
        self.model = UNet3D(params["filters"]).to(device)
        self.batch = params["batch_size"]
        self.steps_per_epoch = math.ceil(len(self.x) / self.batch)
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=params["lr"], momentum=params["momentum"],
            weight_decay=params["weight_decay"], nesterov=True,
        )
        # The reference's schedule: linear warmup from init_lr to lr, then constant (no decay steps).
        warmup = self.steps_per_epoch * params["warmup_epochs"]
        init = params["init_lr"] / params["lr"]
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: init + (1 - init) * s / warmup if s < warmup else 1.0
        )
        shape = [params["data"]["size"]] * 3
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "opt_name": "sgd",
            "opt_base_learning_rate": params["lr"],
            "opt_learning_rate_warmup_epochs": params["warmup_epochs"],
            "opt_initial_learning_rate": params["init_lr"],
            "opt_learning_rate_decay_boundary_epochs": [],  # the learning rate never steps down
            "opt_learning_rate_decay_factor": 1.0,
            "opt_weight_decay": params["weight_decay"],
            "opt_momentum": params["momentum"],
            "oversampling": 0.0,  # whole volumes are trained on: no patches to bias towards foreground
            "training_input_shape": shape,
            "validation_input_shape": shape,
            "validation_overlap": 0.0,  # whole volumes are evaluated at once: no sliding window
            "evaluation_frequency": 1,
        }
        self.train_samples = len(self.x)
        self.eval_samples = len(self.ex)

    def initialized_tensors(self) -> list[str]:
        return self.model.layer_names()

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        gen = epoch_generator(self.seed, epoch)
        for idx in shuffled_batches(len(self.x), self.batch, gen, self.device):
            x, y = self.x[idx], self.y[idx]
            # Random flips along each spatial axis, the same for the whole batch: an anatomy seen in
            # a mirror is still an anatomy, and flipping costs nothing.
            flips = [d for d in (2, 3, 4) if torch.rand(1, generator=gen).item() < 0.5]
            if flips:
                x, y = x.flip(flips), y.flip([d - 1 for d in flips])
            yield x, y

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return dice_ce_loss(self.model(x), y)

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        """Mean over held-out volumes and foreground classes of the Dice of the argmax segmentation."""
        self.model.eval()
        scores = []
        for i in range(0, len(self.ex), self.batch):
            pred = self.model(self.ex[i : i + self.batch]).argmax(dim=1)
            scores.append(dice_per_class(one_hot(pred), one_hot(self.ey[i : i + self.batch]))[:, 1:])
        return torch.cat(scores).mean().item()
