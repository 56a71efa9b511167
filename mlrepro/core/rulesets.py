"""What a ruleset of mlperf_logging says about benchmarks: which exist and how many runs each needs, and what
the rules say of each beyond that (``rulesets.yaml``: the metric's direction, the olympic mean's drops, RCPs).

The counts come from the release that judges: a release's own folder (``logging_release``: a checkout of
mlcommons/logging at a tag, or ``pip install --target DIR``), whose ``benchmark_meta.py`` and rule folders are read
as data, never imported (the project's own processes judge with one release only, :mod:`mlrepro.core.versions`);
else, for a ruleset of the releases table, that release as the table records it (:mod:`mlrepro.core.releases`);
else the installed ``mlperf_logging``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from mlrepro.core import release_table
from mlrepro.core.errors import MlreproError

RULES = Path(__file__).with_name("rulesets.yaml")


class ReleaseError(MlreproError, ValueError):
    """A release folder whose ``benchmark_meta.py`` cannot be read as data."""


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
def _installed_folder() -> Path:
    import mlperf_logging

    return Path(mlperf_logging.__file__).resolve().parent.parent


def _package(release: Path | None) -> Path:
    return (release if release is not None else _installed_folder()) / "mlperf_logging"


@cache
def _meta(release: Path | None) -> dict[str, Any]:
    """The two tables of ``benchmark_meta.py`` (result file counts, allowed benchmarks), as literals; for a release
    of the table (mlrepro/core/release_table.py), as the table records them: known before it is installed."""
    if release is not None and (pin := release_table.of_folder(release)):
        return pin.meta()
    path = _package(release) / "benchmark_meta.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        tables = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                  and node.targets[0].id in ("_ALL_RESULT_FILE_COUNTS", "_ALL_ALLOWED_BENCHMARKS")}
    except (OSError, SyntaxError, ValueError) as e:
        raise ReleaseError(f"{path}: not an mlperf-logging benchmark table ({e}); point logging_release at a "
                           "checkout of mlcommons/logging at a tag") from None
    if len(tables) != 2:
        raise ReleaseError(f"{path}: no _ALL_RESULT_FILE_COUNTS / _ALL_ALLOWED_BENCHMARKS tables")
    return tables


@cache
def known_rulesets(usage: str = "training", release: Path | None = None) -> tuple[str, ...]:
    """The rulesets the release has compliance rules for (``release`` None: the installed one)."""
    if release is not None and (pin := release_table.of_folder(release)):
        return (pin.ruleset,) if pin.usage == usage else ()
    folder = _package(release) / "compliance_checker"
    names = (p.name.split("_", 1)[1] for p in folder.glob(f"{usage}_*") if p.is_dir())
    return tuple(sorted((n for n in names if re.fullmatch(r"\d+\.\d+\.\d+", n)), key=_version_key))


def allowed_benchmarks(ruleset: str, usage: str = "training", release: Path | None = None) -> tuple[str, ...]:
    """``benchmark_meta.get_allowed_benchmarks``: the ruleset's entry, else its major.minor one."""
    table = _meta(release)["_ALL_ALLOWED_BENCHMARKS"]
    if usage not in table:
        raise ValueError(f"usage {usage} not supported!")
    by_ruleset = table[usage]
    short = ".".join(ruleset.split(".")[:-1])
    if ruleset not in by_ruleset and short not in by_ruleset:
        raise ValueError(f"ruleset {ruleset} is not supported in {usage}")
    return tuple(by_ruleset[ruleset] if ruleset in by_ruleset else by_ruleset[short])


def required_runs(benchmark: str, usage: str = "training", release: Path | None = None) -> int:
    return int(_meta(release)["_ALL_RESULT_FILE_COUNTS"][usage][benchmark])


def release_folder(configured: str | None, ruleset: str, usage: str = "training") -> Path | None:
    """The folder of the release that judges ``ruleset`` (``logging_release``: one version's folder, or a
    folder of them named by tag, from which the ruleset's round tag is chosen; else the table's release for the
    ruleset, in the user's cache, installed by a job: mlrepro/core/releases.py); None: the installed one."""
    if not configured:
        return release_table.judging_folder(ruleset, usage)
    from mlrepro.core.versions import resolve

    return resolve(Path(configured), ruleset)


@dataclass(frozen=True)
class Rules:
    """What the rules say of one benchmark beyond its run count."""

    higher_is_better: bool  # the quality metric's direction
    dropped: int  # runs the olympic mean drops at each end of the sorted times
    rcp: bool  # the closed division's RCP check applies (in the rulesets that have RCPs)
    convergence: str  # what the RCP check counts convergence in: epoch_num, samples_count or train_samples
    result_digits: int  # result_<i>.txt numbered with this many digits (unet3d from 2.0.0: result_00..39)


@cache
def _rules_table() -> dict[str, Any]:
    return yaml.safe_load(RULES.read_text(encoding="utf-8"))


def rules(benchmark: str, ruleset: str | None = None, usage: str = "training") -> Rules:
    """``rulesets.yaml``'s entry for ``benchmark`` in ``ruleset``: the defaults, then each override whose
    ``from`` ruleset (default: the first) is not after ``ruleset``, in the file's order (``ruleset`` None:
    the rules as they stand, every override)."""
    table = _rules_table()[usage]
    merged = dict(table["defaults"])
    for override in table["benchmarks"].get(benchmark, []):
        if ruleset is None or _version_key(ruleset) >= _version_key(str(override.get("from", "0.0.0"))):
            merged.update({k: v for k, v in override.items() if k != "from"})
    return Rules(**merged)


def system_status(status: str, ruleset: str, usage: str = "training") -> str:
    """The config's ``status`` (onprem, cloud, preview, research) as the ruleset's system descriptions word it."""
    word = status
    for entry in _rules_table()[usage].get("system_status", []):
        if _version_key(ruleset) >= _version_key(str(entry["from"])):
            word = entry["words"].get(status, status)
    return word


def result_filename(benchmark: str, index: int, ruleset: str) -> str:
    """unet3d results are numbered result_00..39 from training 2.0.0 on (as published)."""
    return f"result_{index:0{rules(benchmark, ruleset).result_digits}d}.txt"


def _version_key(ruleset: str) -> tuple[int, ...]:
    return tuple(int(x) for x in ruleset.split("."))
