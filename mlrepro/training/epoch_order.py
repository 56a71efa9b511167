"""Each epoch's random draws (sample order, masks, augmentation) in every mini model: one CPU generator
per epoch, seeded from the run's seed and the epoch number, so that a seed gives the same run on every
device and an epoch's draws do not depend on how many the epochs before it made."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1000 + epoch)


def shuffled_batches(samples: int, batch: int, generator: torch.Generator,
                     device: torch.device) -> Iterator[torch.Tensor]:
    """One epoch's index batches: a permutation of ``samples`` drawn from ``generator``, cut into
    ``ceil(samples / batch)`` batches (the last one smaller), on ``device``."""
    order = torch.randperm(samples, generator=generator).to(device)
    for start in range(0, samples, batch):
        yield order[start : start + batch]
