"""NVIDIA's own flow on a CPU (issue 45 item 4): a copy of NVIDIA's v4.1 folder with the stand-in harness
(tests/nvidia_standin/main.py) at code/main.py, run by the folder's own Makefile targets: its engines (the stand-in's
device), the runs, NVIDIA's staging, every audit test verified by mlcommons/inference's run_verification.py within
the Makefile's own retries, compliance staging and truncation; then the package as vendor_package makes it (relaid
out for v6.1) and the official v6.1 checker as vendor_check runs it, which must accept it but for a shortened run's
errors. The system is both datacenter and edge, so that one flow run serves all four scenarios, Server's audits
included. NVIDIA's and MLCommons' code is unpacked from ../shared/data, never copied into the project."""

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

from mlrepro.inference.vendor import package, relayout
from tests.conftest import REPO
from tests.rounds import DATA, extract
from tests.test_inference import _train

NVIDIA_CODE = DATA / "mlperf_inference_nvidia_code_v4.1.tar.xz"
CHECKER = DATA / "mlperf_inference_submission_checker.tar.xz"
STANDIN = REPO / "tests" / "nvidia_standin" / "main.py"
SYSTEM_ID = "mlrepro-ci-cpu"  # a custom system (README: add_custom_system), not one of NVIDIA's
SYSTEM = f"{SYSTEM_ID}_TRT"  # harness.py get_system_name
SUBMITTER = "mlrepro-ci"
# v6.1 requires resnet in SingleStream, MultiStream and Offline of an edge system, and Server besides of a
# "datacenter,edge" one (its required-scenarios-datacenter-edge; v6.1 has no datacenter resnet), with TEST01 and
# TEST04 in each; NVIDIA's staging (update_results/utils.py) keeps every scenario of such a system
SYSTEM_TYPE = "datacenter,edge"
SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server")
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
    # the scenario's compliance check, failed by its audits' performance checks above (their shortened runs); an
    # audit's own failure (verdict, files) has an error of its own, which no pattern here matches
    rf"Some compliance check Checks failed for: {_DIR}/",
    r"SUMMARY: submission has errors",
]


def _env(tmp: Path, standin_conf: Path, nvidia_root: Path) -> dict[str, str]:
    """standin/trace.sh's environment (nvidia-smi, uname and curl stand-ins first on PATH), the stand-in's sleep
    (no GPU thermal state to wait out before TEST04), this venv's python3 (the Makefiles call python3), the
    stand-in's settings."""
    (tmp / "scratch").mkdir()
    path = [str(nvidia_root / "standin" / "bin"), str(STANDIN.parent / "bin"), str(Path(sys.executable).parent),
            os.environ["PATH"]]
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
    # the system's description as a submitter writes it; staging reads its type (scripts/utils.py get_system_type:
    # a datacenter system's SingleStream and MultiStream runs are dropped)
    (folder / "systems" / f"{SYSTEM}.json").write_text(json.dumps(_system_json(), indent=2))
    shutil.copytree(checker_dir / "v6.1", folder / "build" / "inference")
    shutil.copyfile(checker_dir / "v2.0" / "tools" / "submission" / "truncate_accuracy_log.py",
                    folder / "build" / "inference" / "tools" / "submission" / "truncate_accuracy_log.py")
    # v6.1's verify_performance.py imports tools/submission/log_parser.py, which mlcommons/inference main keeps and
    # the archive left out: the v2.0 tree's copy (as tests/test_inference_audit_tests.py does)
    shutil.copyfile(checker_dir / "v2.0" / "tools" / "submission" / "log_parser.py",
                    folder / "build" / "inference" / "tools" / "submission" / "log_parser.py")
    return folder


def _system_json() -> dict[str, Any]:
    """The system description the package needs (NVIDIA's staging writes none; a submitter writes it in systems/)."""
    return {
        "division": "closed", "submitter": SUBMITTER, "system_name": "mlrepro CI stand-in (CPU)", "status": "rdi",
        "system_type": SYSTEM_TYPE, "system_type_detail": "CI machine; mlrepro's mini ResNet on CPU",
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
    params = yaml.safe_load((REPO / "minis" / "resnet" / "defaults.yaml").read_text())
    trained = _train("resnet", params, tmp_path / "mini")
    checkpoint = trained["run_json"].parent / "checkpoint.pt"
    conf = tmp_path / "standin.json"
    settings: dict[str, Any] = {
        "system_id": SYSTEM_ID, "min_duration_ms": 1000,
        # harness.py's QUERY_METRIC_CONSTRAINTS at v4.1 (the checker's OFFLINE_MIN_SPQ and resnet's min queries)
        "query_constraints": {"Offline": 24576, "SingleStream": 1024, "MultiStream": 270336, "Server": 270336},
        # SingleStream: mlrepro/inference/settings.py's shortened (the minimum duration holds ~125 queries of the
        # stand-in's 8 ms); MultiStream: above its 662 (where LoadGen's p99 estimate is the slowest query), so that
        # the estimate the audits compare sets aside the few queries a shared machine stalls (4 at 1,400); Server:
        # the shortened 662, which outlasts the minimum duration at its rate (asserted below)
        "min_query_count": {"SingleStream": 64, "MultiStream": 1400, "Server": 662},
        "benchmarks": {"resnet50": {"mini": "resnet", "data": str(trained["data"]), "params": str(trained["params"]),
                                    "checkpoint": str(checkpoint)}}}
    conf.write_text(json.dumps(settings))
    folder = _folder(tmp_path, nvidia_root, checker_dir)
    env = _env(tmp_path, conf, nvidia_root)
    logs = folder / "build" / "logs"

    # the engines (the stand-in's: its device's service time, fixed once per scenario), then the runs, by the
    # folder's own targets; each where harness.py puts it, with the metadata.json staging reads
    _make(folder, env, "generate_engines", f"RUN_ARGS={RUN_ARGS}")
    for mode in ("PerformanceOnly", "AccuracyOnly"):
        _make(folder, env, "run_harness", f"RUN_ARGS={RUN_ARGS} --test_mode={mode}", f"TIMESTAMP={mode}")
    for scenario in SCENARIOS:
        perf = json.loads((logs / "PerformanceOnly" / SYSTEM / "resnet50" / scenario / "metadata.json").read_text())
        acc = json.loads((logs / "AccuracyOnly" / SYSTEM / "resnet50" / scenario / "metadata.json").read_text())
        assert perf["result_validity"] == "VALID" and acc["accuracy_pass"] is True, (perf, acc)
        # staging's validity check, met: Offline's query holds the round's samples, the others stop early
        assert perf["satisfies_query_constraint"] is (scenario == "Offline") and perf["early_stopping_met"], perf
    offline = json.loads((logs / "PerformanceOnly" / SYSTEM / "resnet50" / "Offline" / "metadata.json").read_text())
    assert offline["effective_samples_per_query"] == 24576, offline
    # Server: LoadGen's Poisson arrivals at the stated rate (the audits' --server_target_qps_adj_factor scales it)
    server = json.loads((logs / "PerformanceOnly" / SYSTEM / "resnet50" / "Server" / "metadata.json").read_text())
    assert server["result_completed_samples_per_sec"] > 0, server
    conf_text = (folder / "build" / "loadgen-configs" / SYSTEM / "resnet50" / "Server" / "user.conf").read_text()
    qps = re.search(r"^\*\.Server\.target_qps = ([0-9.]+)$", conf_text, re.M)
    assert qps, conf_text
    # its query count outlasts the minimum duration: an audit's schedule (the same seed) is then the performance
    # run's stretched by 1 / --server_target_qps_adj_factor, which TEST01 (within 10 %) accepts at 0.92
    assert settings["min_query_count"]["Server"] / float(qps[1]) > settings["min_duration_ms"] / 1000, conf_text

    # NVIDIA's staging picks them (it drops a run whose metadata fails its checks), then the audits and theirs
    _make(folder, env, "stage_results")
    staging = folder / "build" / "submission-staging"
    staged = staging / "closed" / SUBMITTER
    for scenario in SCENARIOS:
        run = staged / "results" / SYSTEM / "resnet50" / scenario
        for sub in ("performance/run_1/mlperf_log_detail.txt", "accuracy/accuracy.txt", "accuracy/metadata.json"):
            assert (run / sub).is_file(), (scenario, sub)
    # every audit verifies: the round's run_verification.py as auditing.py calls it, within the Makefile's own
    # retries (TEST01 twice, TEST04 three times); one scenario a call, as the pipeline's vendor_audit jobs run them
    for scenario in SCENARIOS:
        for test in TESTS:
            run_args = f"RUN_ARGS=--benchmarks=resnet50 --scenarios={scenario}"
            out = _make(folder, env, f"run_audit_{test.lower()}", run_args)
            log_dir = folder / "build" / "compliance_logs" / test / SYSTEM / "resnet50" / scenario
            audit_md = json.loads((log_dir / "metadata.json").read_text())
            verdict = (log_dir / test / "verify_performance.txt").read_text()
            assert audit_md["audit_test"] == test and audit_md["audit_success"] is True, (audit_md, out[-4000:])
            assert "TEST PASS" in verdict, verdict
            scores = "; ".join(line.strip() for line in verdict.splitlines() if "score" in line.lower())
            print(f"{test} {scenario}: {out.count(f'{test} trial')} trial(s); {scores}")  # the margins, in CI's log
    _make(folder, env, "stage_compliance")
    for scenario in SCENARIOS:
        for test in TESTS:
            for sub in ("verify_performance.txt", "performance/run_1/mlperf_log_detail.txt"):
                assert (staged / "compliance" / SYSTEM / "resnet50" / scenario / test / sub).is_file(), (scenario, sub)
    _make(folder, env, "truncate_results")
    assert (folder / "build" / "full_results").is_dir()
    acc_txt = (staged / "results" / SYSTEM / "resnet50" / "Offline" / "accuracy" / "accuracy.txt").read_text()
    assert re.search(r"^hash=[0-9a-f]{64}$", acc_txt, re.M), acc_txt

    # the package as the pipeline's vendor_package makes it (the staging, the folder's code/ and the system's
    # description, relaid out for v6.1, each change named), then vendor_check's official v6.1 checker
    pkg = tmp_path / "package"
    changes = package.assemble(folder, SUBMITTER, "v6.1", pkg)
    assert f"closed/{SUBMITTER}/measurements/{SYSTEM}/resnet50/Offline/{SYSTEM}_Offline.json -> closed/{SUBMITTER}/" \
        f"results/{SYSTEM}/resnet50/Offline/measurements.json" in changes, changes
    assert sum("/compliance/" in c for c in changes) == len(TESTS) * len(SCENARIOS), changes
    record = package.check(pkg, checker_dir / "v6.1", "v6.1", SUBMITTER, tmp_path / "check")
    errors, output = record["errors"], record["output"]
    assert not record["passed"] and not (pkg / "scaling.json").exists()  # the checker read a copy
    shortened = [re.compile(p) for p in SHORTENED]
    unexpected = [e for e in errors if not any(p.fullmatch(e) for p in shortened)]
    assert errors and not unexpected, "beyond a shortened run's errors:\n" + "\n".join(unexpected) + output[-4000:]
    for scenario in SCENARIOS:  # TEST01's accuracy: its logged responses are the accuracy run's
        assert re.search(rf"Compliance test accuracy check \(deterministic mode\) in \S+/{scenario}/TEST01 passed",
                         output), output[-4000:]
    for pattern in shortened[:3]:  # each of a shortened run's errors, for every scenario
        assert {m["scenario"] for e in errors if (m := pattern.fullmatch(e))} == set(SCENARIOS), pattern.pattern


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
