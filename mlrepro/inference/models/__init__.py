"""Pre- and post-processing of the served models whose training Workload builds the model and its held-out
set (SSD, BERT, RNN-T, 3D U-Net): one module each. The part they share is here: the converged run's weights
loaded into the Workload that trained them (minis/<bm>/model.py), so the served model, its held-out set and
its FP32 reference metric (Workload.evaluate) are the training's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mlrepro.core.minis import load_module


def checkpointed(benchmark: str, data_dir: Path, params: dict[str, Any], checkpoint: Path,
                 device: torch.device) -> tuple[Any, Any]:
    """(the workflow's module, its Workload with the checkpoint's weights, in eval mode)."""
    module = load_module(benchmark)
    workload = module.Workload(data_dir, params, device, 0)  # the seed only orders training batches
    workload.model.load_state_dict(torch.load(checkpoint, map_location=device, weights_only=True))
    workload.model.eval()
    return module, workload
