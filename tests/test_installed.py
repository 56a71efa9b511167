"""The package installed as a wheel (``pip install .`` into a fresh venv) runs the Snakefile of a checkout of
the same version: nothing of the package is read from the checkout, everything of the workflow is.

The fresh venv gets its dependencies from the project's own environment (a ``.pth`` line: the machine
reaches no package index in the fast tier, and torch alone is gigabytes); the checkout it runs holds no
``mlrepro/`` folder, so the package can only come from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import REPO, write_mllog

# A wheel built and installed into a fresh venv: half a minute before the first test, so not the fast tier's.
pytestmark = pytest.mark.integration


def _tracked(dest: Path) -> Path:
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh venv's python, a checkout without the package)."""
    tmp = tmp_path_factory.mktemp("installed")
    source = _tracked(tmp / "source")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True)
    python = tmp / "venv" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # the project environment's packages, after the venv's own (the wheel's mlrepro comes first)
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-build-isolation", str(source)], check=True, capture_output=True, timeout=600)
    checkout = tmp / "checkout"
    shutil.copytree(source, checkout, ignore=shutil.ignore_patterns("mlrepro"))
    return python, checkout


def _run(python: Path, cwd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLREPRO_WORKFLOW")}
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)


def test_the_wheel_finds_the_workflow_of_the_checkout_it_runs_in(installed: tuple[Path, Path]) -> None:
    python, checkout = installed
    proc = _run(python, checkout, "-c", "import json, mlrepro; print(json.dumps([mlrepro.__file__, "
                "str(mlrepro.PACKAGE_ROOT), str(mlrepro.PROJECT_ROOT)]))")
    assert proc.returncode == 0, proc.stderr
    module, package_root, project_root = json.loads(proc.stdout)
    assert Path(module).is_relative_to(python.parent.parent) and "site-packages" in module
    assert Path(project_root) == checkout.resolve() and Path(package_root) != checkout.resolve()
    # elsewhere, MLREPRO_WORKFLOW names the checkout
    proc = subprocess.run([str(python), "-c", "import mlrepro; print(mlrepro.PROJECT_ROOT)"], cwd=checkout.parent,
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "MLREPRO_WORKFLOW": str(checkout)})
    assert Path(proc.stdout.strip()) == checkout.resolve()


def test_the_wheel_gates_a_result(installed: tuple[Path, Path], tmp_path: Path) -> None:
    python, checkout = installed
    good = write_mllog(tmp_path / "result_0.txt", "resnet", 1_700_000_000_000, 1.0)
    proc = _run(python, checkout, "-m", "mlrepro.gate.compliance", str(good), "--ruleset", "2.0.0",
                "--out", str(tmp_path / "verdict.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "verdict.json").read_text())["valid"] is True


def test_the_checkouts_snakefile_plans_the_default_with_the_wheel(installed: tuple[Path, Path]) -> None:
    python, checkout = installed
    proc = _run(python, checkout, "-m", "snakemake", "-n", "--cores", "2")
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text and "rule run:" in text.replace("localrule", "rule"), text[-3000:]
