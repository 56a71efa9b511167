"""Audit scores, verdicts and tables on packages derived from the fixtures, against the official tools.

Each package is a copy of Baidu's two v1.1 systems (tests/fixtures/audit/round) with one change: a
submitted ``scaling.json`` the RCP check disagrees with; ``number_of_nodes: "1.0"``; a third system
whose runs converge too fast for the RCP (a failure) and stop two minutes early (the fastest time).
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlrepro.audit import pipeline, summary
from mlrepro.audit import report as audit_report
from mlrepro.audit.check import check_round
from mlrepro.audit.runfile import audit_bytes
from mlrepro.core.rulesets import TITLES, known_rulesets, table_order

FIXTURES = Path(__file__).parent / "fixtures" / "audit"
BAIDU = FIXTURES / "round" / "Baidu"
MXNET = "1_node_8_A100_NGC21.05_MXNet"
RULESET = "1.1.0"


def audit(root: Path, out: Path) -> dict[str, Any]:
    checks = check_round(root, out / "checks.json", out / ".cache", "training", RULESET, 2)
    result = pipeline.summarize(root, checks, "training", RULESET)
    pipeline.write_summary(result, out)
    audit_report.write(result, out / "report")
    return result


def rows_by_folder(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["system_folder"]: r for r in result["rows"]}


def add_fast_failing_system(org: Path, name: str = "fast_fail") -> None:
    """A copy of the MXNet system whose evaluations claim a quarter of the epochs and whose runs stop 2 min early."""
    shutil.copytree(org / "results" / MXNET, org / "results" / name)
    desc = json.loads((org / "systems" / f"{MXNET}.json").read_text())
    (org / "systems" / f"{name}.json").write_text(json.dumps({**desc, "system_name": name}))
    for f in (org / "results" / name / "resnet").glob("result_*.txt"):
        lines = []
        for line in f.read_text().splitlines(keepends=True):
            if '"key": "eval_accuracy"' in line:
                line = re.sub(r'"epoch_num": (\d+)', lambda m: f'"epoch_num": {int(m.group(1)) // 4}', line)
            if '"key": "run_stop"' in line:
                line = re.sub(r'"time_ms": (\d+)', lambda m: f'"time_ms": {int(m.group(1)) - 120_000}', line)
            lines.append(line)
        f.write_text("".join(lines))


def test_a_disagreeing_factor_is_resolved_as_the_official_second_run_and_flagged(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    shutil.copytree(BAIDU, pkg / "Baidu")
    (pkg / "Baidu" / "results" / MXNET / "resnet" / "scaling.json").write_text('{"scaling_factor": 1.5}')
    result = audit(pkg, tmp_path / "out")
    row = rows_by_folder(result)[MXNET]
    assert row["resnet:submitted_factor"] == 1.5
    # the RCP check writes RCP mean / mean epochs (it does so on the pristine fixture, see test_audit)
    computed = 1.0043956043956044
    assert row["resnet:computed_factor"] == pytest.approx(computed, rel=1e-12)
    assert row["resnet:rcp_norm_factor"] == row["resnet:computed_factor"] and row["resnet:factor_check"] == "DISAGREE"
    assert row["resnet"] == row["resnet:raw_score"] * row["resnet:computed_factor"]
    assert "scaling.json holds 1.5" in row["verdict_messages"]
    # the official summarizer on a fresh copy: its first run applies the submitted 1.5, its RCP check
    # then rewrites scaling.json, and its second run (the published table) applies what it wrote
    official = tmp_path / "official"
    shutil.copytree(pkg, official)
    runs = []
    for name in ("first.csv", "second.csv"):
        subprocess.run([sys.executable, "-m", "mlperf_logging.result_summarizer", "Baidu", "training", RULESET,
                        "-csv", str(tmp_path / name)], cwd=official, capture_output=True, check=True)
        with open(tmp_path / name, newline="") as f:
            runs.append({r["details_url"]: r for r in csv.DictReader(f)}[row["details_url"]])
    first, second = (float(r["resnet"]) for r in runs)
    assert math.isclose(first, row["resnet:raw_score"] * 1.5, rel_tol=0, abs_tol=1e-9)
    assert math.isclose(row["resnet"], second, rel_tol=0, abs_tol=1e-9) and not math.isclose(first, second)
    with open(tmp_path / "out" / "summary.csv", newline="") as f:
        assert next(r for r in csv.DictReader(f) if r["system_folder"] == MXNET)["resnet:factor_check"] == "DISAGREE"
    assert (pkg / "Baidu" / "results" / MXNET / "resnet" / "scaling.json").read_text() == '{"scaling_factor": 1.5}'


def test_a_failing_result_never_tops_a_table(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    shutil.copytree(BAIDU, pkg / "Baidu")
    add_fast_failing_system(pkg / "Baidu")
    system_json = pkg / "Baidu" / "systems" / f"{MXNET}.json"
    system_json.write_text(json.dumps({**json.loads(system_json.read_text()), "number_of_nodes": "1.0"}))
    result = audit(pkg, tmp_path / "out")
    rows = rows_by_folder(result)
    fast, good = rows["fast_fail"], rows[MXNET]
    assert fast["resnet"] < good["resnet"]  # the fastest time of all ...
    assert fast["resnet:rcp"] == "Fail" and fast["resnet:verdict"].startswith("fail: ") and "RCP" in fast[
        "resnet:verdict"]
    # ... from logs the compliance checker judges as it judges the originals (4 of 5 compliant)
    assert fast["files_compliant"] == good["files_compliant"] == 4
    # errors belong to the system they name: the good system passes although the organisation fails
    assert (good["package_checker"], fast["package_checker"], rows["1_node_8_A100_PaddlePaddle"]["package_checker"]) \
        == ("pass", "fail", "fail")
    from importlib.metadata import version

    # the verdict names the release whose RCP table decided (the installed one: no round's own release)
    assert good["resnet:verdict"] == f"scored; RCP for BS 3264: release {version('mlperf-logging')}"
    (entry,) = result["seed_tables"]["closed"]
    assert (entry["system_folder"], entry["minutes"]) == (MXNET, good["resnet"])
    assert (entry["failing_system_folder"], entry["failing_minutes"]) == ("fast_fail", fast["resnet"])
    # "1.0" nodes is one node
    assert (entry["single_system_folder"], entry["per_accelerator"]) == (MXNET, good["resnet"] * 8)
    assert entry["single_failing_system_folder"] == "fast_fail"
    index = (tmp_path / "out" / "report" / "index.html").read_text()
    assert "Faster but failing a check: fast_fail" in index
    cell = re.search(r'<td class="num bad" title="fail: [^"]*"\s+data-sort="[^"]*">([^<]*)', index)
    assert cell and "&#x2717;" in cell.group(1)
    # the early run_stop is impossible but "compliant": a sanity warning, not a verdict
    assert "eval_accuracy line(s) after run_stop" in fast["resnet:sanity"] or "backwards" in fast["resnet:sanity"]
    assert fast["sanity_warnings"] >= 5


def test_sanity_checks_warn_without_changing_the_verdict() -> None:
    src = (BAIDU / "results" / MXNET / "resnet" / "result_0.txt").read_bytes()
    lines = src.decode().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if '"key": "run_start"' in line)
    stop = next(i for i, line in enumerate(lines) if '"key": "run_stop"' in line)
    stop_ms = int(re.search(r'"time_ms": (\d+)', lines[stop]).group(1))  # type: ignore[union-attr]
    # a second run_start, later than run_stop: time goes backwards and the time to train is negative
    late_start = re.sub(r'"time_ms": \d+', f'"time_ms": {stop_ms + 60_000}', lines[start])
    hostile = "".join([*lines[:start + 1], late_start, *lines[start + 1:]]).encode()
    plain, bad = audit_bytes(src, "training", RULESET), audit_bytes(hostile, "training", RULESET)
    assert plain.sanity == []
    assert bad.valid and plain.valid  # the official verdict (a warning about run_start only) stays "compliant"
    assert bad.minutes is not None and bad.minutes < 0
    text = " ".join(bad.sanity)
    assert "2 run_start lines" in text and "negative" in text and "backwards" in text
    # run_stop before run_start, and an eval after run_stop
    moved = [*lines[:start], lines[stop], *lines[start:stop], *lines[stop + 1:]]
    rec = audit_bytes("".join(moved).encode(), "training", RULESET)
    assert any("comes before run_start" in w for w in rec.sanity)
    assert any("after run_stop" in w for w in rec.sanity)


def test_csv_cells_cannot_be_formulas(tmp_path: Path) -> None:
    rows = [{"submitter": "=HYPERLINK(\"http://x\")", "system": "@SUM(A1)", "notes": "+1", "framework": "-2",
             "resnet": -0.5, "accelerators_count": -3, "org": "\tTab", "verdict_messages": "plain"}]
    summary.write(rows, "training", RULESET, str(tmp_path / "s.csv"), str(tmp_path / "s.json"))
    with open(tmp_path / "s.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["submitter"], row["system"], row["notes"], row["framework"], row["org"]) == (
        "'=HYPERLINK(\"http://x\")", "'@SUM(A1)", "'+1", "'-2", "'\tTab")
    # numbers stay numbers
    assert (row["resnet"], row["accelerators_count"], row["verdict_messages"]) == ("-0.5", "-3", "plain")


def test_availability_categories_and_number_of_nodes() -> None:
    assert [summary.category(s) for s in ("onprem", "available", "Available cloud", "cloud", "preview", "research",
                                          "Research, Development, or Internal (RDI)", "bogus", None)] == [
        "Available on-premise", "Available on-premise", "Available cloud", "Available cloud", "Preview",
        "Research, Development, or Internal (RDI)", "Research, Development, or Internal (RDI)", "", ""]
    assert [summary.nodes(v) for v in ("1", "1.0", 1.0, 1, " 2 ", "x", None, "nan")] == [1, 1, 1, 1, 2, None, None,
                                                                                        None]


@pytest.mark.parametrize("ruleset", [r for r in known_rulesets() if r >= "1.0.0"])
def test_every_ruleset_has_titled_columns_in_order(ruleset: str) -> None:
    order = table_order(ruleset)
    assert len(order) == len(set(order)) and order
    assert all(b in TITLES for b in order), [b for b in order if b not in TITLES]
    cols = summary.columns("training", ruleset)
    assert len(cols) == len(set(cols))


def test_a_system_without_accelerators_never_wins_per_accelerator() -> None:
    def row(folder: str, minutes: float, accelerators: Any, nodes: Any) -> dict[str, Any]:
        return {"division": "closed", "org": "O", "system": folder, "system_folder": folder, "resnet": minutes,
                "accelerators_count": accelerators, "number_of_nodes": nodes, "ranked": ["resnet"],
                "resnet:verdict": "scored"}

    rows = [row("cpu-only", 1.0, 0, "1"), row("no-count", 2.0, None, 1.0), row("gpu", 10.0, 8, 1.0),
            row("big", 0.5, 64, "8")]
    (entry,) = summary.seed_tables(rows, "training", RULESET)["closed"]
    assert entry["system_folder"] == "big"  # at scale: the fastest of all
    assert (entry["single_system_folder"], entry["per_accelerator"]) == ("gpu", 80.0)
