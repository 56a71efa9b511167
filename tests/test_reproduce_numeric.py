"""The numeric reproduction verdict (mlrepro/reproduce/numeric.py) on constructed submissions and reproductions:
result files edited to be 10% faster are not reproduced, with the interval showing it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mlrepro.core.outputs import Outputs
from mlrepro.reproduce import compare, numeric
from mlrepro.reproduce.plan import BenchmarkPlan
from tests.conftest import write_mllog

# five runs of about ten minutes, 4 s of initialisation each (write_mllog); the reproduction's are 0.3% slower
MINUTES = [10.0, 10.1, 9.95, 10.05, 10.02]
EPOCHS = 35.0


def _log(path: Path, minutes: float, seed: int) -> Path:
    start = 1_700_000_000_000 + seed * 3_600_000
    write_mllog(path, "resnet", start, minutes, seed=seed, division="closed")
    bs = {"namespace": "", "time_ms": start - 2000, "event_type": "POINT_IN_TIME", "key": "global_batch_size",
          "value": 3264, "metadata": {"file": "test.py", "lineno": 1}}
    # converged at epoch 35, as the RCP of batch size 3264 (training_1.1.0) does on average
    text = path.read_text().replace('"epoch_num": 1', f'"epoch_num": {EPOCHS}')
    path.write_text(f":::MLLOG {json.dumps(bs)}\n" + text)
    return path


def _case(tmp_path: Path, submitted_scale: float, device: str = "cpu") -> tuple[BenchmarkPlan, Path, Path]:
    org, rep = tmp_path / "org", tmp_path / "reproduction"
    (org / "systems").mkdir(parents=True)
    (org / "systems" / "sys.json").write_text(json.dumps({"division": "closed", "accelerators_per_node": "0"}))
    files = []
    for i, m in enumerate(MINUTES):
        files.append(str(_log(org / "results" / "sys" / "resnet" / f"result_{i}.txt", m, i)))
        _log(rep / "runs" / "sys" / "resnet" / str(i) / "result.txt", m * 1.003, i)
        (rep / "runs" / "sys" / "resnet" / str(i) / "run.json").write_text(
            json.dumps(_run_record(i, m * 1.003, device)))
        (rep / "compliance" / "sys" / "resnet").mkdir(parents=True, exist_ok=True)
        (rep / "compliance" / "sys" / "resnet" / f"{i}.json").write_text(json.dumps({"valid": True}))
    if submitted_scale != 1.0:  # the submitter's edit: every run_stop (and the lines before it) moved earlier
        for f in map(Path, files):
            text = f.read_text()
            start = int(re.search(r'"time_ms": (\d+), "event_type": "INTERVAL_START", "key": "run_start"', text)[1])
            f.write_text(re.sub(r'"time_ms": (\d+)',
                                lambda m, s=start: f'"time_ms": {_scaled(int(m[1]), s, submitted_scale)}', text))
    plan = BenchmarkPlan(name="resnet", implementation="", result_files=files, seeds=list(range(5)), params={},
                         data_seed=0, submission={}, dataset_sha256=None)
    return plan, org, rep


def _run_record(seed: int, minutes: float, device: str) -> dict:
    """What the run driver records beside a run: when its code ran (by our clock) and on what."""
    start = 1_700_000_000_000 + seed * 3_600_000
    gpus = {"count": 1, "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 << 30}]}
    return {"wall": {"start_ms": start - 6000, "stop_ms": start + round(minutes * 60_000) + 1000},
            "accelerators": {"count": 0, "devices": []} if device == "cpu" else gpus}


def _scaled(t: int, start: int, scale: float) -> int:
    return t if t <= start else start + round((t - start) * scale)


def _compare(tmp_path: Path, scale: float, tolerance: float | None = None, device: str = "cpu") -> dict:
    plan, org, rep = _case(tmp_path, scale, device)
    return compare.compare_benchmark(plan, org, Outputs(rep), "sys",
                                     {"division": "closed", "accelerators_per_node": "0"}, "1.1.0", tolerance)


def test_the_same_runs_reproduce_within_the_tolerance_with_the_rcp_p_value(tmp_path: Path) -> None:
    b = _compare(tmp_path, 1.0)
    assert b["verdict"] == "reproduced", b["reasons"]
    time = b["numeric"]["time_to_train"]
    assert time["ratio"] == pytest.approx(1.003) and 0.975 < time["low"] < 1.003 < time["high"] < 1.025
    assert b["numeric"]["tolerance"] == 0.025  # resnet is an imaging benchmark
    assert b["numeric"]["throughput"]["ratio"] == pytest.approx(1 / 1.003)
    assert b["numeric"]["init_time"]["ratio"] == pytest.approx(1.0)
    rcp = b["numeric"]["rcp"]
    assert rcp["message"] == "RCP found" and rcp["passed"] and 0.05 < rcp["p"] < 1
    assert re.fullmatch(r"time to train within 0\.3% \(95% interval \[[+-]\d\.\d%, \+\d\.\d%\]\) of the submitted "
                        r"score; convergence consistent with the RCP \(p = 0\.\d+\)", b["numeric"]["line"])


def test_results_edited_to_be_ten_percent_faster_are_not_reproduced(tmp_path: Path) -> None:
    b = _compare(tmp_path, 0.9)
    assert b["verdict"] == "not reproduced"
    time = b["numeric"]["time_to_train"]
    # the reproduced runs take 1.003 / 0.9 of the submitted times: the whole interval lies beyond +2.5%
    assert time["ratio"] == pytest.approx(1.003 / 0.9, rel=1e-3) and 1.025 < time["low"] <= time["high"]
    line = b["numeric"]["line"]
    assert re.match(r"time to train 11\.4% longer than the submitted score "
                    r"\(95% interval \[\+1\d\.\d%, \+1\d\.\d%\]\), beyond the 2\.5% tolerance", line), line
    assert any(r.startswith("time to train 11.4% longer") for r in b["reasons"])
    # the tolerance is the user's: at 15% the same runs reproduce
    assert _compare(tmp_path / "loose", 0.9, tolerance=0.15)["verdict"] == "reproduced"
    # on other hardware the times are reported, not deciding
    other = _compare(tmp_path / "gpu", 0.9, device="cuda:0")
    assert other["verdict"] == "reproduced" and not other["numeric"]["time_decides"]


def test_convergence_faster_than_the_rcp_fails_with_its_p_value() -> None:
    test = numeric.rcp_test("resnet", "closed", "1.1.0", 3264, [30.0, 30.0, 31.0, 30.0, 30.0])
    assert test["passed"] is False and test["p"] < 0.05
    clause, reason = numeric.rcp_verdict(test, 5)
    assert clause == reason == f"convergence faster than the RCP allows (p = {test['p']:.3g})"
    assert numeric.rcp_verdict(test, 2)[1] is None  # two runs: reported, not deciding
    missing = numeric.rcp_test("resnet", "closed", "1.1.0", 100, [30.0] * 5)
    assert missing["p"] is None and numeric.rcp_verdict(missing, 5)[1] is None
