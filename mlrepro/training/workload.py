"""The contract between the shared training loop and one benchmark's mini implementation.

Each ``minis/<benchmark>/model.py`` is a self-contained file (model, data generator, loss,
evaluation) that exposes:

- ``generate_data(out_dir: Path, params: dict, seed: int) -> None``: write the dataset, deterministic
  in ``params`` and ``seed``; files only, any format.
- ``Workload``: a class following the :class:`Workload` protocol below.

The loop in :mod:`mlrepro.train` owns the MLPerf log, the clock, stopping and the optimisation step
(zero the gradients, backpropagate the loss, clip, step the optimizer and the scheduler); a workload
says what a step trains on and what it minimises.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the pipeline's own processes must not pay for importing torch
    import torch

Metric = float | dict[str, float]


class Workload(Protocol):
    # MLPerf hyperparameter keys and values logged once before run_start
    # (global_batch_size, opt_name, opt_base_learning_rate, ...).
    hyperparameters: dict[str, Any]
    train_samples: int
    eval_samples: int
    # True when a larger metric is better (accuracy, AUC, Dice); False for WER.
    higher_is_better: bool
    model: torch.nn.Module  # put in training mode before each epoch's steps
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler  # stepped after every optimizer step
    grad_clip_norm: float | None  # the gradients' total norm is clipped to it before each step
    # Optional, default False: batches are index tensors of the global batch, so a run spanning several
    # processes (mlrepro.training.distributed) trains data-parallel, each rank on its share.
    data_parallel: bool
    # Optional, default ("eval_accuracy",): the MLLOG keys each evaluation's value is logged under (flux1's
    # checker asks for averaged_validation_loss beside eval_accuracy).
    eval_keys: tuple[str, ...]

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        """``seed`` is the run's: every random draw after the weights' initialisation (data order,
        augmentation, sampling) comes from generators seeded with it, never from global state."""
        ...

    def initialized_tensors(self) -> list[str]:
        """Names logged as ``weights_initialization`` events (the closed rules' lists where they exist)."""
        ...

    def batches(self, epoch: int) -> Iterable[Any]:
        """The epoch's minibatches in training order, one per optimizer step."""
        ...

    def loss(self, batch: Any) -> torch.Tensor:
        """The scalar to minimise on one minibatch."""
        ...

    def evaluate(self, epoch: int) -> Metric:
        """The quality metric on held-out data; a dict for multi-metric benchmarks (maskrcnn)."""
        ...

    # Optional: ``samples_count(epoch) -> int``, the training samples seen by the end of ``epoch``; where a
    # workload defines it, the evaluation's events carry it as ``samples_count`` metadata (flux1).


def reached(value: Metric, target: Metric, higher_is_better: bool) -> bool:
    if isinstance(value, dict):
        assert isinstance(target, dict), "a dict metric needs a dict target"
        return all(reached(value[k], t, higher_is_better) for k, t in target.items())
    assert not isinstance(target, dict)
    return value >= target if higher_is_better else value <= target
