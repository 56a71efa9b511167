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
    "gnmt": "Translation, recurrent (GNMT)",
    "transformer": "Translation, non-recurrent (Transformer)",
    "ncf": "Recommendation (NCF)",
    "dlrm_dcnv2": "Recommendation (DLRM-dcnv2)",
    "dlrmv4": "Recommendation (DLRMv4)",
    "gpt3": "LLM pre-training (GPT-3 175B)",
    "stable_diffusion": "Text to image (Stable Diffusion v2)",
    "flux1": "Text to image (Flux.1)",
    "llama2_70b_lora": "LLM fine-tuning (Llama 2 70B LoRA)",
    "gnn": "Graph neural network (R-GAT)",
    "rgat": "Graph neural network (R-GAT)",
    "retinanet": "Object detection, light (RetinaNet)",
    "llama31_405b": "LLM pre-training (Llama 3.1 405B)",
    "llama31_8b": "LLM pre-training (Llama 3.1 8B)",
    "gpt_oss_20b": "LLM pre-training (gpt-oss 20B)",
    "deepseekv3_671b": "LLM pre-training (DeepSeek-V3 671B)",
    "qwen35_397b_grpo": "LLM reinforcement learning (Qwen3.5 397B GRPO)",
}


def title(benchmark: str) -> str:
    return TITLES.get(benchmark, benchmark)


def table_order(ruleset: str, usage: str = "training") -> tuple[str, ...]:
    """The ruleset's benchmarks once each: the seed documents' order, then the rest in the ruleset's order."""
    present = tuple(dict.fromkeys(allowed_benchmarks(ruleset, usage)))
    return tuple(b for b in SEED_ORDER if b in present) + tuple(b for b in present if b not in SEED_ORDER)


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
