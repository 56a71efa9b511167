"""The project files a mini run executes, found from the imports: what a run's ``computes`` digest covers.

A run of ours executes ``python -m mlrepro.train`` and its benchmark's ``minis/<bm>/*.py``; every
``mlrepro`` module they import, at module level or inside a function, is followed, with the packages'
``__init__.py`` files that importing it runs. Imports are read from the source (nothing is imported), so
the set is known while the DAG is planned. ``tests/test_executed_code.py`` checks it against the modules
that a real import of the entry point and each model loads.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from mlrepro import PACKAGE_ROOT

PACKAGE = "mlrepro"
ENTRY = PACKAGE_ROOT / "mlrepro" / "train.py"
# Launch plumbing that cannot change what a run computes: the warm-start parent forks the same training
# code a cold start runs (tests/test_warm.py compares their results), so editing it keeps finished runs.
LAUNCH_ONLY = frozenset({"mlrepro.runs.warm"})


def _module_file(name: str) -> Path | None:
    base = PACKAGE_ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> str:
    """The module a file is, under the folder the package is imported from ("": a file outside it, such as
    a benchmark's minis/<bm>/model.py of the checkout where the package is installed)."""
    if not path.is_relative_to(PACKAGE_ROOT):
        return ""
    parts = path.relative_to(PACKAGE_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> set[str]:
    """The project modules ``path`` imports anywhere in its body (``from X import y``: X, and X.y if a module)."""
    names: set[str] = set()
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this file's package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return {n for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}


def _with_parents(name: str) -> Iterable[str]:
    parts = name.split(".")
    return (".".join(parts[:i]) for i in range(1, len(parts) + 1))


def project_files(entries: Iterable[Path]) -> list[Path]:
    """``entries`` and every project file they import, directly or not, sorted (launch plumbing left out)."""
    seen: set[Path] = set()
    todo = [Path(e) for e in entries]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imported(path):
            for module in _with_parents(name):  # importing a.b.c runs a/__init__.py and a/b/__init__.py
                if module in LAUNCH_ONLY:
                    continue
                if (found := _module_file(module)) is not None and found not in seen:
                    todo.append(found)
    return sorted(seen)


def mini_run_files(folder: Path) -> list[Path]:
    """The project files outside ``folder`` that a run of the mini implementation in ``folder`` executes."""
    own = sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)
    return [p for p in project_files([ENTRY, *own]) if not p.is_relative_to(folder)]
