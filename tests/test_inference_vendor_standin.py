"""NVIDIA's own flow on a CPU (issue 45 item 4): a copy of NVIDIA's v4.1 folder with the stand-in harness
(tests/nvidia_standin/main.py) at code/main.py, run by the folder's own Makefile targets; NVIDIA's staging and
truncation scripts stage the runs, the audit tests run and are verified by mlcommons/inference's
run_verification.py, and the official v6.1 checker judges the package (after mlrepro's relayout), which it must
accept but for a shortened run's errors. NVIDIA's and MLCommons' code is unpacked from ../shared/data, never copied
into the project."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlrepro.inference.vendor import relayout
from tests.conftest import REPO
from tests.rounds import DATA, extract
from tests.test_inference import _train

NVIDIA_CODE = DATA / "mlperf_inference_nvidia_code_v4.1.tar.xz"
CHECKER = DATA / "mlperf_inference_submission_checker.tar.xz"
STANDIN = REPO / "tests" / "nvidia_standin" / "main.py"
SYSTEM_ID = "mlrepro-ci-cpu"  # a custom system (README: add_custom_system), not one of NVIDIA's
SYSTEM = f"{SYSTEM_ID}_TRT"  # harness.py get_system_name
SUBMITTER = "mlrepro-ci"
# v6.1 requires resnet in SingleStream, MultiStream and Offline of an edge system (not of a datacenter one), with
# TEST01 and TEST04 in each
SCENARIOS = ("SingleStream", "MultiStream", "Offline")
TESTS = ("TEST01", "TEST04")
RUN_ARGS = f"--benchmarks=resnet50 --scenarios={','.join(SCENARIOS)}"
# The v6.1 checker's errors on shortened runs of a mini served for resnet50 in the closed division, all of them:
# the minimum duration (1 s instead of 600 s) and the performance samples (the mini's 256 held-out images against
# the 1024 the round requires) of the performance run and of each audit's, the accuracy run over those 256 images
# instead of ImageNet's 50,000, then the per-run and summary lines. No error of the samples per query (Offline
# served 24,576), of the accuracy (the mini's top-1 on its held-out set), of the layout, the measurements or the
# system description.
_DIR = rf"\S+/closed/{SUBMITTER}/results/{SYSTEM}/resnet50/(?P<scenario>\w+)"
_PERF = r"(performance/run_1/mlperf_log_detail\.txt|TEST0[14])"  # the submission's performance run or an audit's
SHORTENED = [
    rf"{_DIR}/{_PERF} performance_sample_count, found 256, needs to be >= 1024",
    rf"{_DIR}/{_PERF} Test duration less than 600s in user config\. expected=600000, found=1000",
    rf"{_DIR}/accuracy/mlperf_log_detail\.txt accurcy run does not cover all dataset, "
    r"accuracy samples: 256, dataset size: 50000",
    rf"Some (performance|accuracy) checks Checks failed for: {_DIR}/({_PERF}|accuracy/mlperf_log_detail\.txt)",
    rf"NoResults {_DIR}/performance/run_1/mlperf_log_detail\.txt",
    r"SUMMARY: submission has errors",
]
# What the checker says of an audit test that is not in the package: NVIDIA's staging leaves out one whose
# verification failed (here only one whose official run_verification.py measured TEST FAIL, a timing on a shared
# machine: tests/test_inference_audit_tests.py's finding), and so do these lines.
_T = r"(?P<test>TEST0[14])"
MISSING_AUDIT = [
    rf"Missing {_T} in compliance dir {_DIR}/",
    rf"Missing accuracy file in compliance dir\. Needs file {_DIR}/{_T}/verify_accuracy\.txt",
    rf"Missing performance file in compliance dir\. Needs file {_DIR}/{_T}/verify_performance\.txt",
    rf"Missing perfomance file in compliance dir\. Needs file {_DIR}/{_T}/performance/run_1/mlperf_log_detail\.txt",
    rf"{_DIR}/{_T}/verify_performance\.txt is missing in \S+/(?P=scenario)/(?P=test)",
    rf"Execution occurred in running check {_DIR}/\. Running (performance|accuracy)_check in ComplianceCheck",
    rf"Some compliance check Checks failed for: {_DIR}/",
]


def _v61_check(pkg: Path, checker_dir: Path) -> tuple[list[str], str]:
    """The official v6.1 checker, as its README runs it, on ``pkg``: its ERROR messages and its whole output."""
    argv = [sys.executable, "-m", "submission_checker.main", "--input", str(pkg), "--version", "v6.1",
            "--submitter", SUBMITTER, "--csv", str(pkg.parent / "official.csv")]
    proc = subprocess.run(argv, cwd=checker_dir / "v6.1" / "tools" / "submission", capture_output=True, text=True,
                          timeout=300)
    output = proc.stdout + proc.stderr
    return [m.group(1).strip() for m in re.finditer(r"^\[[^\]]* ERROR\] (.*)$", output, re.M)], output


def _env(tmp: Path, standin_conf: Path, nvidia_root: Path) -> dict[str, str]:
    """standin/trace.sh's environment (nvidia-smi, uname and curl stand-ins first on PATH), this venv's python3
    next (the Makefiles call python3), the stand-in's settings."""
    (tmp / "scratch").mkdir()
    path = [str(nvidia_root / "standin" / "bin"), str(Path(sys.executable).parent), os.environ["PATH"]]
    return {**os.environ, "PATH": os.pathsep.join(path),
            "EXTERNAL_USER": "1", "SKIP_DRIVER_CHECK": "1", "SUBMITTER": SUBMITTER,
            "MLPERF_SCRATCH_PATH": str(tmp / "scratch"), "MLREPRO_NVIDIA_STANDIN": str(standin_conf),
            "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _make(folder: Path, env: dict[str, str], target: str, *args: str) -> str:
    proc = subprocess.run(["make", target, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"make {target} {args}: exit {proc.returncode}\n{out[-6000:]}"
    return out


def _folder(tmp: Path, nvidia_root: Path, checker_dir: Path) -> Path:
    """A copy of NVIDIA's folder with the stand-in at code/main.py, a custom system and, at build/inference (where
    NVIDIA's `make build` clones mlcommons/inference), the official v6.1 tree with the truncation script of the
    v2.0 tree (the v6.1 tree in ../shared/data has none; the script is the same file's older copy)."""
    folder = tmp / "NVIDIA"
    shutil.copytree(nvidia_root / "closed" / "NVIDIA", folder)
    shutil.copyfile(STANDIN, folder / "code" / "main.py")
    # the system's type, which staging reads (scripts/utils.py get_system_type): a datacenter system's SingleStream
    # and MultiStream runs are dropped
    (folder / "systems" / f"{SYSTEM}.json").write_text(json.dumps({"system_type": "edge"}))
    shutil.copytree(checker_dir / "v6.1", folder / "build" / "inference")
    shutil.copyfile(checker_dir / "v2.0" / "tools" / "submission" / "truncate_accuracy_log.py",
                    folder / "build" / "inference" / "tools" / "submission" / "truncate_accuracy_log.py")
    # v6.1's verify_performance.py imports tools/submission/log_parser.py, which mlcommons/inference main keeps and
    # the archive left out: the v2.0 tree's copy (as tests/test_inference_audit_tests.py does)
    shutil.copyfile(checker_dir / "v2.0" / "tools" / "submission" / "log_parser.py",
                    folder / "build" / "inference" / "tools" / "submission" / "log_parser.py")
    return folder


def _system_json() -> dict[str, Any]:
    """The system description the package needs (NVIDIA's staging writes none; a submitter writes it)."""
    return {
        "division": "closed", "submitter": SUBMITTER, "system_name": "mlrepro CI stand-in (CPU)", "status": "rdi",
        "system_type": "edge", "system_type_detail": "CI machine; mlrepro's mini ResNet on CPU",
        "number_of_nodes": "1", "host_processor_model_name": "CPU", "host_processors_per_node": "1",
        "host_processor_core_count": "2", "host_memory_capacity": "24 GB", "host_storage_capacity": "1 TB",
        "host_storage_type": "SSD", "accelerators_per_node": "0", "accelerator_model_name": "N/A",
        "accelerator_memory_capacity": "N/A", "framework": "PyTorch (mlrepro mini), LoadGen",
        "operating_system": "Linux", "host_networking": "N/A", "host_networking_topology": "N/A",
        "host_network_card_count": "0", "host_memory_configuration": "N/A", "accelerator_host_interconnect": "N/A",
        "accelerator_frequency": "N/A", "accelerator_interconnect": "N/A", "accelerator_interconnect_topology": "N/A",
        "accelerator_memory_configuration": "N/A", "accelerator_on-chip_memories": "N/A",
        "cooling": "air", "hw_notes": "", "sw_notes": "", "host_processor_caches": "N/A",
        "host_processor_frequency": "N/A", "host_processor_interconnect": "N/A", "other_software_stack": "N/A",
    }


@pytest.mark.integration
def test_nvidia_flow_on_the_standin_is_accepted_by_the_official_v6_1_checker_but_for_the_shortened_run(
        tmp_path: Path) -> None:
    for archive in (NVIDIA_CODE, CHECKER):
        if not archive.is_file():
            pytest.skip(f"{archive} is absent (read from ../shared/data)")
    nvidia_root = extract(NVIDIA_CODE, tmp_path / "nvidia") / "mlperf_inference_nvidia_code_v4.1"
    checker_dir = extract(CHECKER, tmp_path / "checker")
    params = yaml.safe_load((REPO / "workflows" / "resnet" / "defaults.yaml").read_text())
    trained = _train("resnet", params, tmp_path / "mini")
    checkpoint = trained["run_json"].parent / "checkpoint.pt"
    conf = tmp_path / "standin.json"
    conf.write_text(json.dumps({
        "system_id": SYSTEM_ID, "min_duration_ms": 1000,
        # harness.py's QUERY_METRIC_CONSTRAINTS at v4.1 (the checker's OFFLINE_MIN_SPQ and resnet's min queries)
        "query_constraints": {"Offline": 24576, "SingleStream": 1024, "MultiStream": 270336},
        "min_query_count": {"SingleStream": 64, "MultiStream": 662},  # mlrepro/inference/settings.py's shortened
        "benchmarks": {"resnet50": {"mini": "resnet", "data": str(trained["data"]), "params": str(trained["params"]),
                                    "checkpoint": str(checkpoint)}}}))
    folder = _folder(tmp_path, nvidia_root, checker_dir)
    env = _env(tmp_path, conf, nvidia_root)
    logs = folder / "build" / "logs"

    # the runs, by the folder's own targets; each where harness.py puts it, with the metadata.json staging reads
    for mode in ("PerformanceOnly", "AccuracyOnly"):
        _make(folder, env, "run_harness", f"RUN_ARGS={RUN_ARGS} --test_mode={mode}", f"TIMESTAMP={mode}")
    for scenario in SCENARIOS:
        perf = json.loads((logs / "PerformanceOnly" / SYSTEM / "resnet50" / scenario / "metadata.json").read_text())
        acc = json.loads((logs / "AccuracyOnly" / SYSTEM / "resnet50" / scenario / "metadata.json").read_text())
        assert perf["result_validity"] == "VALID" and acc["accuracy_pass"] is True, (perf, acc)
        # staging's validity check, met: Offline's query holds the round's samples, the others stop early
        assert perf["satisfies_query_constraint"] is (scenario == "Offline") and perf["early_stopping_met"], perf
    assert perf["effective_samples_per_query"] == 24576, perf

    # NVIDIA's staging picks them (it drops a run whose metadata fails its checks), then the audits and theirs
    _make(folder, env, "stage_results")
    staging = folder / "build" / "submission-staging"
    staged = staging / "closed" / SUBMITTER
    for scenario in SCENARIOS:
        run = staged / "results" / SYSTEM / "resnet50" / scenario
        for sub in ("performance/run_1/mlperf_log_detail.txt", "accuracy/accuracy.txt", "accuracy/metadata.json"):
            assert (run / sub).is_file(), (scenario, sub)
    failed: set[tuple[str, str]] = set()
    for scenario in SCENARIOS:  # one scenario a call: a failed audit stops main.py's loop over scenarios
        for test in TESTS:
            run_args = f"RUN_ARGS=--benchmarks=resnet50 --scenarios={scenario}"
            proc = subprocess.run(["make", f"run_audit_{test.lower()}", run_args], cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=600)
            log_dir = folder / "build" / "compliance_logs" / test / SYSTEM / "resnet50" / scenario
            audit_md = json.loads((log_dir / "metadata.json").read_text())
            assert audit_md["audit_test"] == test, audit_md
            verdict = (log_dir / test / "verify_performance.txt").read_text()
            if proc.returncode == 0:
                assert audit_md["audit_success"] is True and "TEST PASS" in verdict, (audit_md, verdict)
            else:  # only the official script's timing verdict may fail it, after the Makefile's retries
                assert audit_md["audit_success"] is False and "TEST FAIL" in verdict, proc.stdout[-4000:]
                failed.add((scenario, test))
    _make(folder, env, "stage_compliance")
    for scenario in SCENARIOS:
        for test in TESTS:
            staged_test = staged / "compliance" / SYSTEM / "resnet50" / scenario / test
            assert staged_test.is_dir() is ((scenario, test) not in failed), (scenario, test)
    _make(folder, env, "truncate_results")
    assert (folder / "build" / "full_results").is_dir()
    acc_txt = (staged / "results" / SYSTEM / "resnet50" / "Offline" / "accuracy" / "accuracy.txt").read_text()
    assert re.search(r"^hash=[0-9a-f]{64}$", acc_txt, re.M), acc_txt

    # the package: the staging, the folder's code and a system description (as a submitter's export adds them),
    # relaid out for v6.1 (each change named), then the official checker
    shutil.copytree(folder / "code" / "resnet50", staged / "code" / "resnet50")
    (staged / "systems").mkdir()
    (staged / "systems" / f"{SYSTEM}.json").write_text(json.dumps(_system_json(), indent=2))
    pkg = tmp_path / "package"
    changes = relayout.to_results_layout(staging, pkg)
    assert f"closed/{SUBMITTER}/measurements/{SYSTEM}/resnet50/Offline/{SYSTEM}_Offline.json -> closed/{SUBMITTER}/" \
        f"results/{SYSTEM}/resnet50/Offline/measurements.json" in changes, changes
    assert sum("/compliance/" in c for c in changes) == 2 * len(SCENARIOS) - len(failed), changes
    errors, output = _v61_check(pkg, checker_dir)
    shortened = [re.compile(p) for p in SHORTENED]
    missing = [re.compile(p) for p in MISSING_AUDIT]
    unexpected = [e for e in errors if not any(p.fullmatch(e) for p in shortened + missing)]
    assert errors and not unexpected, "beyond a shortened run's errors:\n" + "\n".join(unexpected) + output[-4000:]
    for pattern in shortened[:3]:  # each of a shortened run's errors, for every scenario
        assert {m["scenario"] for e in errors if (m := pattern.fullmatch(e))} == set(SCENARIOS), pattern.pattern
    # an audit error for exactly the audits that failed their verification, and none for the others
    said = {(m["scenario"], m["test"]) for e in errors for p in missing[:1] if (m := p.fullmatch(e))}
    assert said == failed, (said, failed)
    assert not failed or any(p.fullmatch(e) for e in errors for p in missing[-1:]), output[-4000:]


def test_relayout_moves_exactly_the_measurements_the_audits_and_the_code(tmp_path: Path) -> None:
    """The v5.1 layout NVIDIA's staging writes, rewritten for v6.0 on: four kinds of change, each named; logs
    untouched; the staged folder not written; a link in it not followed."""
    org = tmp_path / "staged" / "closed" / "org"
    scen = Path("sys1") / "resnet50" / "Offline"
    (org / "results" / scen / "performance" / "run_1").mkdir(parents=True)
    (org / "results" / scen / "performance" / "run_1" / "mlperf_log_detail.txt").write_text("log")
    (org / "measurements" / scen).mkdir(parents=True)
    for name in ("sys1_Offline.json", "user.conf", "README.md", "mlperf.conf", "calibration_process.adoc"):
        (org / "measurements" / scen / name).write_text(name)
    (org / "compliance" / scen / "TEST01" / "accuracy").mkdir(parents=True)
    (org / "compliance" / scen / "TEST01" / "verify_accuracy.txt").write_text("TEST PASS")
    (org / "code" / "resnet50").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (org / "compliance" / scen / "TEST04").symlink_to(outside)
    before = sorted(str(p) for p in (tmp_path / "staged").rglob("*"))
    changes = relayout.to_results_layout(tmp_path / "staged", tmp_path / "pkg")
    res = tmp_path / "pkg" / "closed" / "org" / "results" / scen
    assert (res / "measurements.json").read_text() == "sys1_Offline.json"
    assert (res / "user.conf").read_text() == "user.conf" and (res / "README.md").read_text() == "README.md"
    assert (res / "TEST01" / "verify_accuracy.txt").read_text() == "TEST PASS" and not (res / "TEST04").exists()
    assert (res / "performance" / "run_1" / "mlperf_log_detail.txt").read_text() == "log"
    assert not (res / "mlperf.conf").exists() and not (tmp_path / "pkg" / "closed" / "org" / "measurements").exists()
    assert (tmp_path / "pkg" / "closed" / "org" / "src" / "resnet50").is_dir()
    assert len(changes) == 5 and "closed/org/code -> closed/org/src" in changes, changes
    assert (tmp_path / "pkg" / "relayout.txt").read_text().splitlines() == changes
    assert sorted(str(p) for p in (tmp_path / "staged").rglob("*")) == before
    with pytest.raises(FileExistsError):
        relayout.to_results_layout(tmp_path / "staged", tmp_path / "pkg")
