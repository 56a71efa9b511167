"""Scoring: the olympic mean by MLPerf's rules, checked against the official result_summarizer."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from mlperf_logging.rcp_checker import rcp_checker
from mlperf_logging.result_summarizer import result_summarizer

from mlrepro import score
from mlrepro.environment import system_desc
from tests.conftest import write_mllog


def _package(root: Path, benchmark: str, minutes: list[float]) -> Path:
    org = root / "testorg"
    desc = system_desc.describe("testorg", "open", "research", "testsystem", 1, "cpu")
    (org / "systems").mkdir(parents=True)
    (org / "systems" / "testsystem.json").write_text(json.dumps(desc))
    for i, m in enumerate(minutes):
        write_mllog(org / "results" / "testsystem" / benchmark / f"result_{i}.txt", benchmark,
                    1_700_000_000_000 + i * 10_000_000, m, seed=i)
    return org


@pytest.mark.parametrize(("benchmark", "minutes"), [
    ("resnet", [3.1, 2.9, 3.3, 3.0, 2.95]),
    ("bert", [1.0 + 0.013 * i * i for i in range(10)]),
    ("unet3d", [2.0 + 0.37 * ((i * 7) % 40) / 40 for i in range(40)]),
])
def test_score_equals_official_summarizer(tmp_path: Path, benchmark: str, minutes: list[float]) -> None:
    org = _package(tmp_path, benchmark, minutes)
    official = result_summarizer.summarize_results(str(org), "training", "2.0.0")[0]
    expected = float(official[benchmark].iloc[0])
    files = sorted((org / "results" / "testsystem" / benchmark).glob("result_*.txt"))
    ours = score.score_files(benchmark, files)["minutes"]
    assert ours is not None and math.isclose(ours, expected, rel_tol=0, abs_tol=1e-9)


def test_one_failed_run_is_the_dropped_slowest() -> None:
    s = score.olympic_mean("resnet", [1.0, 2.0, None, 3.0, 4.0])
    # sorted converged: 1, 2, 3, 4; drop the fastest (1) and, as the slowest, the failed run: mean of 2, 3, 4
    assert s.minutes == pytest.approx(3.0) and s.failed == 1 and s.reason == ""


def test_two_failed_runs_invalidate() -> None:
    s = score.olympic_mean("resnet", [1.0, None, 2.0, None, 4.0])
    assert s.minutes is None and "2 runs failed" in s.reason


def test_unet3d_drops_four_of_each_and_tolerates_four_failures() -> None:
    times = [float(i) for i in range(1, 41)]
    assert score.olympic_mean("unet3d", times).minutes == pytest.approx(sum(range(5, 37)) / 32)
    four_failed = [*times[:36], None, None, None, None]
    assert score.olympic_mean("unet3d", four_failed).minutes == pytest.approx(sum(range(5, 37)) / 32)
    assert score.olympic_mean("unet3d", [*times[:35], None, None, None, None, None]).minutes is None


def test_aborted_run_counts_as_failed(tmp_path: Path) -> None:
    files = [write_mllog(tmp_path / f"result_{i}.txt", "resnet", 1_700_000_000_000, m,
                         status="aborted" if i == 2 else "success") for i, m in enumerate([1, 2, 9, 3, 4])]
    result = score.score_files("resnet", files)
    assert [r["status"] for r in result["runs"]] == ["success", "success", "aborted", "success", "success"]
    assert result["runs"][2]["minutes"] is None
    assert result["minutes"] == pytest.approx(3.0)


def test_closed_division_score_carries_the_rcp_factor_the_official_check_writes(tmp_path: Path) -> None:
    # Baidu's v1.1 resnet converges faster than the RCP mean: the published score is scaled
    src = Path(__file__).parent / "fixtures" / "audit" / "round" / "Baidu" / "results" / \
        "1_node_8_A100_NGC21.05_MXNet" / "resnet"
    folder = tmp_path / "resnet"
    shutil.copytree(src, folder)  # the official check writes scaling.json into the folder it reads
    passed, _, _ = rcp_checker.check_directory(str(folder), "training", "1.1.0", False, False,
                                               rcp_pass="pruned_rcps", set_scaling=True)
    official = json.loads((folder / "scaling.json").read_text())["scaling_factor"]
    assert passed and official > 1
    files = sorted(src.glob("result_*.txt"))
    closed = score.score_files("resnet", files, "1.1.0", "closed")
    assert closed["scaling_factor"] == official and closed["rcp"]["label"] == "Pass"
    assert closed["minutes"] == pytest.approx(closed["raw_minutes"] * official, rel=1e-15)
    opened = score.score_files("resnet", files, "1.1.0", "open")  # no RCP check in the open division
    assert opened["scaling_factor"] == 1.0 and opened["minutes"] == closed["raw_minutes"]
