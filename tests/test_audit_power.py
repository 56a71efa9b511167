"""Energy to train from power logs, against the official result_summarizer (issue 25, item 2).

The package is Baidu's MXNet v1.1 system (tests/fixtures/audit/round) with power logs made here:
``power/result_N/node_0.txt``, ``node_1.txt`` (readings between power_measurement_start and _stop)
and ``sw_0.txt`` (an interconnect estimate) beside every result. The official summarizer (installed
release) runs twice on a fresh copy; its second run's ``resnet:Energy`` is the published energy.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import math
import shutil
from pathlib import Path

import pytest
from mlperf_logging.result_summarizer import result_summarizer as rs

from mlrepro.audit import pipeline, power
from mlrepro.audit.check import check_round

FIXTURES = Path(__file__).parent / "fixtures" / "audit" / "round"
MXNET = "1_node_8_A100_NGC21.05_MXNet"
RULESET = "1.1.0"


def _line(time_ms: float, key: str, value: object) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": value, "metadata": {"file": "power.py", "lineno": 1}}) + "\n"


def _node_log(start: float, watts: list[float], step_ms: float, window_ms: float | None = None) -> str:
    """Readings every ``step_ms`` from ``start``; the stop line after ``window_ms`` (default: the last reading)."""
    lines = [_line(start, "conversion_eff", 0.95), _line(start, "power_measurement_start", None)]
    lines += [_line(start + (i + 1) * step_ms, "power_reading", w) for i, w in enumerate(watts)]
    stop = start + (window_ms if window_ms is not None else len(watts) * step_ms)
    return "".join(lines) + _line(stop, "power_measurement_stop", None)


def _package(tmp_path: Path, zero_window: bool = False) -> Path:
    pkg = tmp_path / "pkg"
    shutil.copytree(FIXTURES / "Baidu", pkg / "Baidu")
    folder = pkg / "Baidu" / "results" / MXNET / "resnet"
    for i, result in enumerate(sorted(folder.glob("result_*.txt"))):
        logs = folder / "power" / result.stem
        logs.mkdir(parents=True)
        zero = zero_window and i == 0
        (logs / "node_0.txt").write_text(_node_log(1000.0, [300.0 + 10 * i, 320.0, 310.0 + i], 500.0,
                                                   window_ms=0.0 if zero else None))
        (logs / "node_1.txt").write_text(_node_log(1200.0, [280.0, 290.0 + i, 295.0], 400.0))
        (logs / "sw_0.txt").write_text(_line(1000.0, "interconnect_power_est", 42.0 + i)
                                       + _line(1000.0, "conversion_eff", 0.9))
    return pkg


def _official_energy(pkg: Path, tmp_path: Path) -> list[float]:
    """resnet:Energy of the MXNet system in the summarizer's two runs on a fresh copy."""
    copy = tmp_path / "official"
    shutil.copytree(pkg, copy)
    energies = []
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for _ in range(2):
                detailed = rs.summarize_results(str(copy / "Baidu"), "training", RULESET)[2]
                row = next(r for r in detailed.to_dict("records") if r["details_url"].endswith(f"{MXNET}.json"))
                energies.append(float(row["resnet:Energy"]))
    finally:
        logging.disable(logging.NOTSET)
    return energies


def _audit(pkg: Path, out: Path) -> dict:  # type: ignore[type-arg]
    checks = check_round(pkg, out / "checks.json", out / ".cache", "training", RULESET, 2)
    result = pipeline.summarize(pkg, checks, "training", RULESET)
    pipeline.write_summary(result, out)
    return result


def _resnet(audit: dict) -> dict:  # type: ignore[type-arg]
    system = next(s for s in audit["orgs"][0]["systems"] if s["folder"] == MXNET)
    return next(b for b in system["benchmarks"] if b["benchmark"] == "resnet")


def test_energy_equals_the_official_summarizers(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    audit = _audit(pkg, tmp_path / "out")
    b = _resnet(audit)
    first, second = _official_energy(pkg, tmp_path)
    assert b["has_power"] and not b["energy_problem"]
    # published: the second run, scaled by the factor its first run's RCP check wrote
    assert math.isclose(b["energy_j"], second, rel_tol=1e-12) and not math.isclose(first, second, rel_tol=1e-9)
    assert math.isclose(b["energy_j"] / b["scaling_factor"], first, rel_tol=1e-12)
    with open(tmp_path / "out" / "summary.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["system_folder"] == MXNET)
    assert math.isclose(float(row["resnet:energy"]), second, rel_tol=1e-12) and row["resnet:energy_verdict"] == "scored"
    other = next(r for r in audit["rows"] if r["system_folder"] != MXNET)
    assert other.get("resnet:energy") is other.get("resnet:energy_verdict") is None  # no power logs: empty cells
    assert not list((pkg / "Baidu" / "results" / MXNET / "resnet").glob("scaling.json"))  # nothing written


def test_a_zero_length_window_gets_its_own_verdict_where_the_official_tool_crashes(tmp_path: Path) -> None:
    pkg = _package(tmp_path, zero_window=True)
    with pytest.raises(ZeroDivisionError):
        _official_energy(pkg, tmp_path)
    audit = _audit(pkg, tmp_path / "out")
    b = _resnet(audit)
    assert b["energy_j"] is None and b["minutes"] is not None  # the time score stands
    assert "power/result_0/node_0.txt: zero-length power measurement window" in b["energy_problem"]
    assert "ZeroDivisionError" in b["energy_problem"]
    row = next(r for r in audit["rows"] if r["system_folder"] == MXNET)
    assert row["resnet:energy_verdict"].startswith("no energy: power/result_0/node_0.txt: zero-length")


def test_a_run_without_node_readings_has_no_energy(tmp_path: Path) -> None:
    folder = tmp_path / "bench"
    (folder / "power" / "result_0").mkdir(parents=True)
    energy = power.run_energy(folder, folder / "result_0.txt", 60_000.0, RULESET, folder)
    assert energy.joules is None and "no power/result_0/node_*.txt" in energy.problem
