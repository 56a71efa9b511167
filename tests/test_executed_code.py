"""A run's digest covers every project file the run executes (exact staleness)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlrepro import PROJECT_ROOT
from mlrepro.core.minis import implemented_benchmarks, mini_dir
from mlrepro.runs.executed_code import ENTRY, mini_run_files, project_files

# Imports the training entry point once, then, in a forked child per benchmark (a fresh copy of the interpreter, as a
# run's process is one: what the entry point imports is loaded in each), that benchmark's model as a run does; each
# child prints a line: the benchmark and the project files the interpreter loaded. One import of torch, not one per
# benchmark.
_LOADED = """
import json, os, sys
import mlrepro.train
from mlrepro.core.minis import load_module
root = sys.argv[1]
for benchmark in sys.argv[2:]:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        load_module(benchmark)
        print(json.dumps([benchmark, sorted({m.__file__ for m in list(sys.modules.values())
                                             if getattr(m, "__file__", None) and m.__file__.startswith(root)})]))
        sys.stdout.flush()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, (benchmark, status)
"""


@pytest.fixture(scope="module")
def loaded() -> dict[str, set[Path]]:
    """benchmark -> the project files a run of it loads."""
    proc = subprocess.run([sys.executable, "-c", _LOADED, str(PROJECT_ROOT / "mlrepro"), *implemented_benchmarks()],
                          capture_output=True, text=True, check=True, cwd=PROJECT_ROOT)
    return {b: {Path(p) for p in files} for b, files in map(json.loads, proc.stdout.splitlines())}


@pytest.mark.parametrize("benchmark", implemented_benchmarks())
def test_every_project_file_a_run_loads_is_in_its_digest(benchmark: str, loaded: dict[str, set[Path]]) -> None:
    covered = set(mini_run_files(mini_dir(benchmark)))
    assert ENTRY in covered and PROJECT_ROOT / "mlrepro" / "training" / "loop.py" in covered
    assert loaded[benchmark] - covered == set(), f"{benchmark}: loaded by a run but outside its digest"
    assert PROJECT_ROOT / "mlrepro" / "training" / "loop.py" in loaded[benchmark]


def test_model_specific_code_stays_out_of_other_benchmarks() -> None:
    detection = PROJECT_ROOT / "mlrepro" / "training" / "detection.py"
    assert detection in mini_run_files(mini_dir("ssd"))
    assert detection not in mini_run_files(mini_dir("resnet"))


def test_imports_inside_functions_and_relative_imports_are_followed(tmp_path: Path, monkeypatch) -> None:
    from mlrepro.runs import executed_code

    pkg = tmp_path / "mlrepro"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import late\n")
    (pkg / "sub" / "late.py").write_text("def f():\n    from mlrepro import lazy\n")
    (pkg / "lazy.py").write_text("")
    (pkg / "unused.py").write_text("")
    entry = tmp_path / "entry.py"
    entry.write_text("import mlrepro.sub\n")
    monkeypatch.setattr(executed_code, "PACKAGE_ROOT", tmp_path)
    found = {p.relative_to(tmp_path).as_posix() for p in project_files([entry])}
    assert found == {"entry.py", "mlrepro/__init__.py", "mlrepro/sub/__init__.py", "mlrepro/sub/late.py",
                     "mlrepro/lazy.py"}
