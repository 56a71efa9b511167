"""Learning-rate schedules the mini implementations share beyond ``torch.optim.lr_scheduler``."""

from __future__ import annotations

from collections.abc import Callable

import torch


class FunctionLR(torch.optim.lr_scheduler.LRScheduler):
    """A schedule given as the learning rate itself at each step (``lr_at(steps done)``), for recipes
    defined that way rather than as a factor of the base rate: every parameter group gets that value."""

    def __init__(self, optimizer: torch.optim.Optimizer, lr_at: Callable[[int], float]) -> None:
        self.lr_at = lr_at
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        return [self.lr_at(self.last_epoch)] * len(self.optimizer.param_groups)
