"""The step loop every benchmark shares (mlrepro.train.train_epoch) and the step-function schedule."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from mlrepro.training.loop import train_epoch
from mlrepro.training.schedules import FunctionLR


def test_function_lr_sets_the_value_of_each_step_in_every_group() -> None:
    w = [torch.nn.Parameter(torch.zeros(1)) for _ in range(2)]
    opt = torch.optim.SGD([{"params": w[:1]}, {"params": w[1:], "weight_decay": 0.0}], lr=0.3)
    sched = FunctionLR(opt, lambda step: [0.3, 0.1, 0.07][min(step, 2)])
    seen = []
    for _ in range(4):
        seen.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    assert seen == [[0.3, 0.3], [0.1, 0.1], [0.07, 0.07], [0.07, 0.07]]  # exact values, not factors


class Toy:
    """A workload of one linear layer whose loss has a gradient of norm 10 at every step."""

    def __init__(self, clip: float | None) -> None:
        self.model = torch.nn.Linear(1, 1, bias=False)
        torch.nn.init.zeros_(self.model.weight)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1.0)
        self.scheduler = FunctionLR(self.optimizer, lambda step: 1.0 / (step + 1))
        self.grad_clip_norm = clip
        self.seen: list[float] = []

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        for _ in range(3):
            yield torch.tensor([[10.0 * epoch]])

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        assert self.model.training
        self.seen.append(float(batch))
        return -(self.model(batch) / batch).sum() * 10  # d loss / d w = -10


@pytest.mark.parametrize(("clip", "moved"), [(None, 10 * (1 + 1 / 2 + 1 / 3)), (0.5, 0.5 * (1 + 1 / 2 + 1 / 3))])
def test_train_epoch_steps_once_per_batch(clip: float | None, moved: float) -> None:
    toy = Toy(clip)
    toy.model.eval()
    train_epoch(toy, 1)  # type: ignore[arg-type]  # a duck-typed Workload
    assert toy.seen == [10.0, 10.0, 10.0]
    assert toy.scheduler.last_epoch == 3  # stepped after each of the three optimizer steps
    assert toy.model.weight.item() == pytest.approx(moved)  # lr 1, 1/2, 1/3; gradients clipped to the norm
