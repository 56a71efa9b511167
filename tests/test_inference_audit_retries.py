"""The audit tests' tries, as NVIDIA's flow makes them (closed/NVIDIA/Makefile of v4.1: TEST01 and TEST05 twice,
TEST04 three times): only a performance failure is tried again, every try is kept and named, and a broken SUT (one
that caches answers, one whose answers changed) still fails its audit, through the job's own code and real LoadGen
runs (tests/loadgen_audit_job.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlrepro.inference import audit_tests
from tests.conftest import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def test_only_a_performance_failure_is_tried_again_up_to_nvidias_count() -> None:
    slow = {"performance": False}
    assert audit_tests.TRIES == {"TEST01": 2, "TEST04": 3, "TEST05": 2}
    for test, allowed in audit_tests.TRIES.items():
        tries = [slow]
        while audit_tests.retry(test, tries):
            tries.append(slow)
        assert len(tries) == allowed, test
    assert not audit_tests.retry("TEST01", [{"accuracy": False, "performance": False}])  # the fallback judges it
    assert not audit_tests.retry("TEST05", [{"performance": True}])
    assert audit_tests.tries_allowed("TEST06") == 1  # a test NVIDIA's flow does not try again runs once


def _audit(tmp_path: Path, round_name: str, test: str, sut: str, shortened: bool = True) -> tuple[int, str, Path]:
    proc = subprocess.run([sys.executable, "-P", str(REPO / "tests" / "loadgen_audit_job.py"), str(tmp_path),
                           round_name, test, sut, "1" if shortened else "0"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr, tmp_path / "audit"


def _record(folder: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((folder / "result.json").read_text())
    return record


@pytest.mark.integration
@pytest.mark.parametrize("round_name", ["v2.0", "v6.1"])
def test_a_caching_sut_fails_test04_on_every_try_each_kept(tmp_path: Path, round_name: str) -> None:
    code, output, folder = _audit(tmp_path, round_name, "TEST04", "cache")
    assert code == 0, output[-3000:]  # shortened: the package carries the failure
    record = _record(folder)
    assert not record["passed"] and len(record["attempts"]) == audit_tests.TRIES["TEST04"], output[-3000:]
    assert all(a["verdicts"] == {"performance": False} and "TEST FAIL" in a["performance"]
               for a in record["attempts"]), record["attempts"]
    for attempt in record["attempts"][:-1]:  # the failed tries' runs and verification, the last one's in place
        kept = folder / attempt["kept"]
        assert (kept / "runs").is_dir() and (kept / "compliance").is_dir(), attempt
    assert "kept" not in record["attempts"][-1] and (folder / "compliance").is_dir()
    retried = output.count("the performance check failed, the accuracy held")
    assert retried == audit_tests.TRIES["TEST04"] - 1, output[-3000:]


@pytest.mark.integration
def test_a_caching_sut_fails_a_submittable_job_after_nvidias_tries(tmp_path: Path) -> None:
    code, output, folder = _audit(tmp_path, "v6.1", "TEST04", "cache", shortened=False)
    assert code == 3 and "TEST04 fails" in output and "after 3 tries" in output, output[-3000:]
    assert not folder.exists()  # a failed job leaves no folder that looks complete


@pytest.mark.integration
@pytest.mark.parametrize("round_name", ["v2.0", "v6.1"])
def test_changed_responses_fail_test01_once_without_a_retry_and_the_fallback_fails(
        tmp_path: Path, round_name: str) -> None:
    code, output, folder = _audit(tmp_path, round_name, "TEST01", "changed")
    assert code == 0, output[-3000:]
    record = _record(folder)
    assert len(record["attempts"]) == 1 and record["verdicts"]["accuracy"] is False, record
    assert record["accuracy_fallback"]["passed"] is False and not record["passed"], record


def test_the_report_names_each_test_tried_again_and_why(tmp_path: Path) -> None:
    from mlrepro.inference import report
    from tests.conftest import make_job

    (tmp_path / "runs").mkdir()
    folder = tmp_path / "audit_tests" / "resnet" / "Offline" / "TEST05"
    folder.mkdir(parents=True)
    slow = "reference score = 1000; test score = 900 <slow>; TEST FAIL: Test score invalid"
    (folder / "result.json").write_text(json.dumps({
        "model": "resnet", "scenario": "Offline", "test": "TEST05", "passed": True, "verdicts": {"performance": True},
        "attempts": [{"try": 1, "verdicts": {"performance": False}, "performance": slow, "kept": "attempts/1"},
                     {"try": 2, "verdicts": {"performance": True}, "performance": "TEST PASS"}]}))
    assert report.audit_rows(tmp_path / "audit_tests") == [
        {"model": "resnet", "scenario": "Offline", "test": "TEST05", "passed": True, "tries": 2,
         "retried": [f"try 1: {slow}"], "fallback": None}]
    (tmp_path / "check.json").write_text(json.dumps({
        "results": [], "findings": [], "package": str(tmp_path / "none"), "round": "v2.0", "checker": "mlrepro",
        "passed": True, "submittable": False, "expected_errors": []}))
    report.job(make_job("inference_report", input={"check": tmp_path / "check.json"},
                        output={"html": tmp_path / "report.html", "table": tmp_path / "table.csv"},
                        params={"runs_dir": tmp_path / "runs"}))
    html = (tmp_path / "report.html").read_text()
    assert "try 1: reference score = 1000; test score = 900 &lt;slow&gt;" in html and ">TEST05<" in html


@pytest.mark.integration
def test_a_shortened_server_run_schedules_test05s_seeds_within_its_tolerance_at_any_rate(tmp_path: Path) -> None:
    """A shortened Server run is its query count, not a second (mlrepro/inference/settings.py): the schedule of
    v2.0's seeds and TEST05's then differ by the same fraction at any rate, well within TEST05's 5%, where a
    second's worth of queries differed by 7.6% at 1,200 queries/s and 10.6% at 1,600."""
    ratios = []
    for qps in (600.0, 1600.0, 20000.0):
        proc = subprocess.run([sys.executable, "-P", str(REPO / "tests" / "loadgen_server_schedule.py"),
                               str(tmp_path / str(qps)), str(qps)], cwd=tmp_path, env=ENV, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        rates = json.loads(proc.stdout.strip().splitlines()[-1])
        assert rates["round"]["queries"] == rates["TEST05"]["queries"] == 662, rates
        ratios.append(rates["TEST05"]["scheduled"] / rates["round"]["scheduled"])
    assert max(ratios) - min(ratios) < 1e-3 and all(abs(r - 1) < 0.025 for r in ratios), ratios
