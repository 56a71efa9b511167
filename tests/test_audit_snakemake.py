"""The repository's Snakefile in audit mode on the fixtures: outputs, cache, bad inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "audit"
SNAKEMAKE = Path(sys.executable).with_name("snakemake")

pytestmark = pytest.mark.integration


def audit(workdir: Path, package: Path) -> subprocess.CompletedProcess[str]:
    # exactly the documented interface; -s/-d so that nothing lands in the repository
    return subprocess.run([str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "2",
                           "--config", f"audit={package}", "ruleset=1.1.0", "audit_out=out"],
                          cwd=workdir, capture_output=True, text=True, check=False)


def test_audit_mode_outputs_cache_and_bad_inputs(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    shutil.copytree(FIXTURES / "round", package)
    shutil.copytree(FIXTURES / "bad" / "Mallory", package / "Mallory")
    files = sorted(str(p) for p in package.glob("*/results/*/*/result_*.txt"))

    first = audit(tmp_path, package)
    assert first.returncode == 0, first.stderr[-4000:]
    out = tmp_path / "out"
    for name in ("summary.csv", "summary.json", "audit.json", "report/index.html"):
        assert (out / name).is_file(), name
    checks = json.loads((out / "checks.json").read_text())
    assert checks["checked"] == files  # a cold cache checks every file once
    summary = json.loads((out / "summary.json").read_text())
    assert {r["org"] for r in summary} == {"Baidu", "Google", "Mallory"}  # bad inputs stop no one
    assert any(r["resnet"] for r in summary if r["org"] == "Baidu")

    changed = package / "Baidu/results/1_node_8_A100_NGC21.05_MXNet/resnet/result_1.txt"
    changed.write_text(changed.read_text() + ":::MLLOG not json\n")
    second = audit(tmp_path, package)
    assert second.returncode == 0, second.stderr[-4000:]
    assert json.loads((out / "checks.json").read_text())["checked"] == [str(changed)]
    audit_json = json.loads((out / "audit.json").read_text())
    baidu = next(o for o in audit_json["orgs"] if o["name"] == "Baidu")
    where = str(changed.relative_to(package))  # paths relative to the audited root
    run = next(f for s in baidu["systems"] for b in s["benchmarks"] for f in b["files"] if f["path"] == where)
    assert not run["valid"] and "Log lines had parsing errors." in run["messages"]
    assert str(tmp_path) not in (out / "audit.json").read_text()  # no path of the auditing machine

    index = (out / "report" / "index.html").read_text()
    assert "<script>alert" not in index and "&lt;script&gt;" in index
    assert not (package / "Baidu/results/1_node_8_A100_NGC21.05_MXNet/resnet/scaling.json").exists()
