"""The real Snakefile end to end on small configurations, judged by the official MLCommons tools."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlperf_logging.result_summarizer import result_summarizer

from mlrepro.datasets import manifest
from tests.conftest import REPO, SYSTEM, TEST_CONFIG, refused_by_planning, snakemake

pytestmark = pytest.mark.integration


@pytest.fixture
def submission(tiny_pipeline: Path) -> Path:
    """The session's shared run of the test configuration: five ResNet runs through every stage."""
    return tiny_pipeline


def test_package_passes_the_official_package_checker(submission: Path) -> None:
    org = submission / "results" / "submission" / "mlrepro"
    out = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(org), "training", "2.0.0",
                          "--log_output", str(submission / "pc.log")], capture_output=True, text=True, check=True)
    assert "PACKAGE CHECKER FOUND NO ERRORS" in out.stdout + out.stderr
    results = sorted((org / "results").glob("*/resnet/result_*.txt"))
    assert len(results) == 5
    assert len(list((org / "systems").glob("*.json"))) == 1
    impl = org / "benchmarks" / "resnet" / "implementations" / "mlrepro-pytorch"
    assert (impl / "minis" / "resnet" / "run_and_time.sh").is_file() and (impl / "mlrepro" / "train.py").is_file()


def test_every_result_passes_the_official_compliance_checker(submission: Path) -> None:
    for result in sorted((submission / "results" / "runs" / SYSTEM / "resnet").glob("*/result.txt")):
        out = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                              "--ruleset", "2.0.0", "--log_output", str(submission / "cc.log"), str(result)],
                             capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stdout + out.stderr


def test_score_equals_the_official_summarizer(submission: Path) -> None:
    org = submission / "results" / "submission" / "mlrepro"
    official = float(result_summarizer.summarize_results(str(org), "training", "2.0.0")[0]["resnet"].iloc[0])
    ours = json.loads((submission / "results" / "scores.json").read_text())[SYSTEM]["resnet"]["minutes"]
    assert math.isclose(ours, official, rel_tol=0, abs_tol=1e-9)


def test_runs_have_distinct_logged_seeds_and_telemetry(submission: Path) -> None:
    runs = [json.loads(p.read_text())
            for p in sorted((submission / "results" / "runs" / SYSTEM / "resnet").glob("*/run.json"))]
    assert len({r["seed"] for r in runs}) == 5
    for r in runs:
        assert r["telemetry"]["host"]["samples"] > 0
        assert r["telemetry"]["nvml"].startswith("no NVML") or r["telemetry"]["gpus"]


def test_report_is_self_contained_and_complete(submission: Path) -> None:
    html = (submission / "results" / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "the report must open offline"
    for part in ("Summary", "Image classification (ResNet-50 v1.5)", "PACKAGE CHECKER FOUND NO ERRORS",
                 "Provenance", "Config hash", "sha256", "<svg", "Telemetry per run"):
        assert part in html, part
    assert html.count("<svg") >= 1 + 5  # a convergence plot and one telemetry chart per run


def test_second_run_has_nothing_to_do_and_a_changed_spec_reruns_only_its_jobs(submission: Path) -> None:
    """A second run does nothing, even with rules/dispatch.py touched: every rule runs it, and Snakemake's code
    trigger compares its time stamp with each output's; the profiles leave that trigger out, so a fresh checkout (or
    an edit of the file) re-runs no finished job (one run for both). What a job acts on is in its params: a changed
    spec (org) re-runs the jobs that read it, and no run."""
    dispatcher = REPO / "rules" / "dispatch.py"
    stat = dispatcher.stat()
    try:
        os.utime(dispatcher)  # newer than every output
        out = snakemake(submission, "--configfile", str(TEST_CONFIG))
        assert "Nothing to be done" in out.stdout + out.stderr
        with_code = snakemake(submission, "--configfile", str(TEST_CONFIG), "-n", "--rerun-triggers", "code")
        assert "Code has changed since last execution" in with_code.stdout  # what the profiles' setting prevents
    finally:
        os.utime(dispatcher, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    dry = snakemake(submission, "--configfile", str(TEST_CONFIG), "-n", "--config", "org=otherorg").stdout
    planned = set(re.findall(r"^(?:local)?rule (\w+):", dry, re.MULTILINE))
    assert {"environment", "package", "report", "inference_package"} <= planned
    assert not planned & {"run", "compliance", "data", "score", "inference_run"}, planned


def test_corrupted_data_is_detected_and_rebuilt(tiny_pipeline_copy: Path) -> None:
    folder = tiny_pipeline_copy / "results" / "data" / "resnet"
    victim = folder / "eval.npz"
    original = victim.read_bytes()
    victim.write_bytes(original[:-10] + b"corrupted!")
    refused_by_planning(tiny_pipeline_copy, yaml.safe_load(TEST_CONFIG.read_text()),
                        says=("eval.npz", "no longer matches its manifest", "Run `snakemake repair`"))
    out = snakemake(tiny_pipeline_copy, "repair", "--configfile", str(TEST_CONFIG))
    assert "eval.npz" in out.stdout + out.stderr and "regenerate it in place" in out.stdout + out.stderr
    assert manifest.verify(folder) == []
    assert victim.read_bytes() == original
    # the rebuilt dataset is byte-identical, so no run is repeated
    out = snakemake(tiny_pipeline_copy, "--configfile", str(TEST_CONFIG))
    assert "Nothing to be done" in out.stdout + out.stderr


def _two_benchmark_config(tmp_path: Path, **resnet: object) -> Path:
    path = tmp_path / f"two-{len(resnet)}.yaml"
    # without the inference stage (tests/test_inference.py's), which is what took this test's time
    path.write_text(yaml.safe_dump({"allow_fewer_runs": True, "only": ["resnet", "dlrm"],
                                    "inference": {"benchmarks": []},
                                    "benchmarks": {"resnet": {"runs": 1, **resnet}, "dlrm": {"runs": 1}}}))
    return path


def test_changed_hyperparameter_reruns_only_its_benchmark(tmp_path: Path) -> None:
    snakemake(tmp_path, "--configfile", str(_two_benchmark_config(tmp_path)))
    html = (tmp_path / "results" / "report.html").read_text()
    assert "Not submittable" in html
    dry = snakemake(tmp_path, "--configfile", str(_two_benchmark_config(tmp_path, lr=0.05)), "--dry-run")
    text = dry.stdout + dry.stderr
    assert f"output: results/runs/{SYSTEM}/resnet/0/result.txt" in text
    assert f"output: results/runs/{SYSTEM}/dlrm/" not in text
    assert f"output: results/compliance/{SYSTEM}/dlrm/" not in text
    assert "rule data:" not in text and "rule environment:" not in text


def test_invalid_config_is_rejected_before_any_job(tmp_path: Path) -> None:
    """Planning refuses it (in this process: what the Snakefile's planning step does; a PlanningError is printed
    without a traceback, tests/test_planning.py), naming the key; nothing is written."""
    refused_by_planning(tmp_path, {"benchmarks": {"resnet": {"lrr": 0.1}}},
                        says=("benchmarks.resnet", "'lrr' was unexpected"))
    assert list(tmp_path.iterdir()) == []
