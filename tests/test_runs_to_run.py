"""``runs_to_run: 7`` for ResNet (N = 5) through the real pipeline: seven runs launched, the median window of five
packaged and scored, every launch in the ledger and the provenance manifest, all seven in the report, and the
audit's check of the package's ledger against its chosen window."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlrepro.audit import manifest as audit_manifest
from mlrepro.core import median_window
from mlrepro.score import olympic_mean
from tests.conftest import SYSTEM, TEST_CONFIG, snakemake

pytestmark = pytest.mark.integration


def test_seven_runs_package_the_median_window_of_five(tmp_path: Path) -> None:
    extra = tmp_path / "seven.yaml"
    extra.write_text("benchmarks:\n  resnet: {runs_to_run: 7}\ninference: {benchmarks: []}\n")
    snakemake(tmp_path, "--configfile", str(TEST_CONFIG), str(extra), timeout=1800)
    results = tmp_path / "results"
    assert sorted(p.name for p in (results / "runs" / SYSTEM / "resnet").iterdir() if p.is_dir()) == [
        str(i) for i in range(7)]
    org = results / "submission" / "mlrepro"
    packaged = sorted((org / "results" / SYSTEM / "resnet").glob("result_*.txt"))
    assert len(packaged) == 5
    doc = json.loads((org / "provenance.json").read_text())
    selection = doc["selections"][SYSTEM]["resnet"]
    assert (selection["ran"], selection["kept"], len(selection["windows"])) == (7, 5, 3)
    # the window is the median of the three windows' olympic scores, recomputed from the runs' own logs
    runs = [{"key": str(i), "run_start_ms": json.loads((results / "runs" / SYSTEM / "resnet" / str(i) / "run.json")
                                                       .read_text())["run_start_ms"],
             "minutes": _minutes(results / "runs" / SYSTEM / "resnet" / str(i) / "result.txt")} for i in range(7)]
    again = median_window.choose(runs, 5, lambda m: olympic_mean("resnet", m).minutes)
    assert selection["chosen_keys"] == again["chosen_keys"]
    assert [Path(r["run_dir"]).name for r in doc["runs"]] == again["chosen_keys"]
    assert sorted({Path(r["run_dir"]).name for r in doc["ledger"]}) == [str(i) for i in range(7)]  # every launch
    # the score is the window's, as the official package checker sees the package
    scores = json.loads((results / "scores.json").read_text())[SYSTEM]["resnet"]
    window = [r["minutes"] for r in again["runs"] if r["key"] in again["chosen_keys"]]
    assert scores["raw_minutes"] == pytest.approx(olympic_mean("resnet", window).minutes)
    assert scores["selection"]["chosen"] == again["chosen"]
    check = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(org), "training", "2.0.0",
                            "--log_output", str(tmp_path / "pc.log")], capture_output=True, text=True, check=True)
    assert "PACKAGE CHECKER FOUND NO ERRORS" in check.stdout + check.stderr
    # the report shows all seven and which window was chosen
    report = (results / "report.html").read_text()
    assert "7 runs launched, 5 packaged" in report and report.count("(not packaged)") == 2
    assert "(chosen)" in report
    # the audit: the ledger agrees with the chosen window; the two runs outside it are notes
    verdict = audit_manifest.verify(org)
    assert verdict.verified, [f.message for f in verdict.findings if f.severity == "error"]
    assert len([f for f in verdict.findings if f.kind == "run outside the chosen window"]) == 2


def _minutes(result: Path) -> float | None:
    from mlrepro.core.mllog_reader import run_minutes

    return run_minutes(result)[0]
