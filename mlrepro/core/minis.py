"""The benchmarks' mini implementations: one folder per benchmark under ``minis/``, its ``model.py``
following the contract of :mod:`mlrepro.training.workload`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from mlrepro import PROJECT_ROOT


def mini_dir(benchmark: str) -> Path:
    return PROJECT_ROOT / "minis" / benchmark


def implemented_benchmarks() -> list[str]:
    return sorted(p.parent.name for p in (PROJECT_ROOT / "minis").glob("*/model.py"))


def load_module(benchmark: str) -> ModuleType:
    path = mini_dir(benchmark) / "model.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no implementation of benchmark {benchmark!r}")
    name = f"mlrepro_mini_{benchmark}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
