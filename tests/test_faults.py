"""Faults on the real pipeline (a tiny config): a hostile output folder name, a second invocation on
the same output folder, SIGKILL of Snakemake mid-run, tampered results and package.

One pipeline run serves every test: Snakemake is started on an output folder whose name carries
spaces, quotes, ``;``, ``$()`` and HTML; while it runs, a second invocation from another working
directory must refuse; then the first is killed (SIGKILL, with its running job) after one run has
finished, and run again to the end.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chromium import PAYLOADS, assert_no_injection
from tests.conftest import REPO, SNAKEMAKE, SYSTEM, refused, refused_by_planning, snakemake

pytestmark = pytest.mark.integration

RUNS = 3  # an earlier Snakemake 9.x records a finished run only when the next is nearly done: a third trains then


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _jobs(log: str) -> list[tuple[str, str]]:
    """(rule, run wildcard) of every job Snakemake's log says it ran (its "rule NAME:" blocks)."""
    jobs = []
    for block in re.split(r"^(?:local)?rule ", log, flags=re.M)[1:]:
        run = re.search(r"^\s*wildcards:.*\brun=(\d+)", block, flags=re.M)
        jobs.append((block.split(":", 1)[0], run.group(1) if run else ""))
    return jobs


def _recorded_runs(log: str) -> set[int]:
    """The runs whose job Snakemake's log says is finished ("Finished jobid: N"), which it says once it has recorded
    the job as complete (its outputs no longer marked incomplete)."""
    ids = {}
    for block in re.split(r"^(?:local)?rule ", log, flags=re.M)[1:]:
        jobid, run = re.search(r"^\s*jobid: (\d+)", block, flags=re.M), re.search(r"\brun=(\d+)", block)
        if block.startswith("run:") and jobid and run:
            ids[jobid.group(1)] = int(run.group(1))
    return {ids[j] for j in re.findall(r"^Finished jobid: (\d+)", log, flags=re.M) if j in ids}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("faults")
    canary = tmp / "CANARY"
    out = tmp / f"out dir;$(touch {canary});`touch {canary}`;'q\"{PAYLOADS[1]}"
    work, other = tmp / "work", tmp / "other"
    work.mkdir()
    other.mkdir()
    cfg = tmp / "tiny.yaml"  # JSON is YAML; --config would mangle the quotes
    # The inference stage, which these faults do not concern, is left out.
    # Cold start: every process of a run is then in Snakemake's process group, which the stop and the kill
    # below reach whole (a warm parent's served driver is not; killing a warm run is tests/test_warm.py's).
    # The inference stage, which these faults do not concern, is left out.
    config = {"only": ["resnet"], "allow_fewer_runs": True, "outdir": str(out), "warm_start": False,
              "inference": {"benchmarks": []}, "benchmarks": {"resnet": {"runs": RUNS}}}
    cfg.write_text(json.dumps(config))
    args = ["--snakefile", str(REPO / "Snakefile"), "--configfile", str(cfg)]
    first_log = tmp / "first.log"
    with first_log.open("w") as log:
        first = subprocess.Popen([*SNAKEMAKE, *args, "--directory", str(work), "--cores", "1"], cwd=REPO,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    runs = [out / "runs" / SYSTEM / "resnet" / str(i) for i in range(RUNS)]
    deadline = time.time() + 600
    # Snakemake runs the runs in an order of its own: wait for one finished, and recorded so by Snakemake (an
    # earlier 9.x starts the next job before it has), and the next one training.
    while time.time() < deadline:
        recorded = _recorded_runs(first_log.read_text(errors="replace"))
        done = [i for i, r in enumerate(runs) if (r / "run.json").exists() and i in recorded]
        training = [i for i, r in enumerate(runs) if (r / "train.log").exists() and not (r / "result.txt").exists()]
        if done and training:
            break
        assert first.poll() is None, "the pipeline ended before the kill"
        time.sleep(0.05)
    # One run finished and recorded, the next started: Snakemake and that run are stopped at once, so that the run
    # cannot finish while the second invocation starts (seconds); stopped, the first invocation still holds the lock.
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        finished_run, killed_run = done[0], training[0]
        finished = _files(runs[finished_run])
        second = snakemake(other, *args[2:], check=False, timeout=300)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # Snakemake and the run it is running
        first.wait()
    half = sorted(p.name for p in runs[killed_run].iterdir())
    snakemake(work, *args[2:], "--unlock")  # Snakemake's own lock survives a SIGKILL (ours does not)
    started = time.monotonic()
    rerun = snakemake(work, *args[2:], timeout=900)
    return {"tmp": tmp, "out": out, "canary": canary, "work": work, "args": args[2:], "config": config,
            "first_pid": first.pid,
            "second": second, "finished_run": finished_run, "finished": finished, "killed_run": killed_run,
            "half": half, "rerun": rerun.stdout + rerun.stderr,
            "rerun_s": time.monotonic() - started}


def test_hostile_outdir_works_and_runs_nothing(pipeline: dict[str, Any]) -> None:
    assert (pipeline["out"] / "report.html").is_file()
    assert not pipeline["canary"].exists(), "a command in the outdir name was run by a shell"
    assert_no_injection(pipeline["out"] / "report.html")


def test_second_invocation_refuses_naming_the_holder(pipeline: dict[str, Any]) -> None:
    second = pipeline["second"]
    # the lock is taken from onstart, once the DAG is built and before the first job: it started none
    text = refused(second, "is in use by another mlrepro pipeline", f"pid {pipeline['first_pid']}",
                   str(pipeline["work"]))
    assert "jobid:" not in text and "Finished job" not in text


def test_sigkill_then_rerun_keeps_finished_results(pipeline: dict[str, Any]) -> None:
    finished = pipeline["out"] / "runs" / SYSTEM / "resnet" / str(pipeline["finished_run"])
    jobs = _jobs(pipeline["rerun"])
    reasons = [line.strip() for line in pipeline["rerun"].splitlines() if "reason:" in line]
    assert _files(finished) == pipeline["finished"], (
        f"a finished run was changed by the kill or the re-run: {jobs}, Snakemake's reasons: {reasons}")
    assert "result.txt" not in pipeline["half"] and "run.json" not in pipeline["half"], pipeline["half"]
    assert ("run", str(pipeline["killed_run"])) in jobs and ("run", str(pipeline["finished_run"])) not in jobs, (
        f"only the killed run runs again: {jobs}")
    for i in range(RUNS):
        run = pipeline["out"] / "runs" / SYSTEM / "resnet" / str(i)
        assert json.loads((run / "run.json").read_text())["result_sha256"]


def test_tampered_result_is_named_and_refused(pipeline: dict[str, Any]) -> None:
    result = pipeline["out"] / "runs" / SYSTEM / "resnet" / "0" / "result.txt"
    original = result.read_bytes()
    try:
        result.write_bytes(original.replace(b'"key": "run_stop"', b'"key": "run_stop" ', 1))
        refused_by_planning(pipeline["work"], pipeline["config"], says=(f"{result}: changed since its run finished",))
    finally:
        result.write_bytes(original)
    report = pipeline["out"] / "report.html"
    proc = snakemake(pipeline["work"], *pipeline["args"])
    assert "Nothing to be done" in proc.stdout + proc.stderr, "a restored result is used as it was"
    assert report.is_file()


def test_tampered_package_is_named_and_rebuilt(pipeline: dict[str, Any]) -> None:
    org = pipeline["out"] / "submission" / "mlrepro"
    packaged = next(org.glob("results/*/resnet/result_0.txt"))
    packaged.write_bytes(packaged.read_bytes().replace(b'"key": "run_stop"', b'"key": "run_stop" ', 1))
    for p in (org / "systems").iterdir():
        p.unlink()
    (org / "systems").rmdir()
    # planning refuses, naming each change and the target that repairs it; the repair removes the derived files
    text = refused_by_planning(pipeline["work"], pipeline["config"],
                               says=(f"{packaged}: changed", "systems", "missing", "Run `snakemake repair`"))
    assert (pipeline["out"] / "package_check.json").exists(), text[-3000:]
    snakemake(pipeline["work"], "repair", *pipeline["args"])
    assert not (pipeline["out"] / "package_check.json").exists()
    snakemake(pipeline["work"], *pipeline["args"])
    assert packaged.read_bytes() == (pipeline["out"] / "runs" / SYSTEM / "resnet" / "0" / "result.txt").read_bytes()
    assert list((org / "systems").glob("*.json"))
