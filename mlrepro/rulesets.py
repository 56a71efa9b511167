"""What a ruleset of mlperf_logging says about benchmarks: which exist and how many runs each needs."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from mlperf_logging import benchmark_meta
from mlperf_logging.compliance_checker import mlp_compliance

# The eight benchmarks of the seed documents, in the order their tables use.
SEED_ORDER = ("dlrm", "bert", "rnnt", "maskrcnn", "ssd", "resnet", "unet3d", "minigo")

TITLES = {
    "resnet": "Image classification (ResNet-50 v1.5)",
    "bert": "NLP (BERT)",
    "dlrm": "Recommendation (DLRM)",
    "maskrcnn": "Object detection, heavy (Mask R-CNN)",
    "ssd": "Object detection, light (SSD / RetinaNet)",
    "rnnt": "Speech recognition (RNN-T)",
    "unet3d": "Image segmentation (3D U-Net)",
    "minigo": "Reinforcement learning (MiniGo)",
}


@cache
def known_rulesets(usage: str = "training") -> tuple[str, ...]:
    folder = Path(mlp_compliance.__file__).parent
    names = (p.name.split("_", 1)[1] for p in folder.glob(f"{usage}_*") if p.is_dir())
    return tuple(sorted((n for n in names if re.fullmatch(r"\d+\.\d+\.\d+", n)), key=_version_key))


def allowed_benchmarks(ruleset: str, usage: str = "training") -> tuple[str, ...]:
    return tuple(benchmark_meta.get_allowed_benchmarks(usage, ruleset))


def required_runs(benchmark: str, usage: str = "training") -> int:
    return int(benchmark_meta.get_result_file_counts(usage)[benchmark])


def result_filename(benchmark: str, index: int, ruleset: str) -> str:
    """unet3d results are numbered result_00..39 from training 2.0.0 on (as published)."""
    width = 2 if benchmark == "unet3d" and _version_key(ruleset) >= (2, 0, 0) else 1
    return f"result_{index:0{width}d}.txt"


def _version_key(ruleset: str) -> tuple[int, ...]:
    return tuple(int(x) for x in ruleset.split("."))
