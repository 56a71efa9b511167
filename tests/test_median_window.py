"""M > N runs (mlrepro/core/median_window.py): the median window of N consecutive runs, the score of it, and the
audit of a package's ledger against its chosen window (mlrepro/audit/manifest.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mlrepro.audit import manifest as audit_manifest
from mlrepro.core import median_window
from mlrepro.package import provenance
from mlrepro.score import _scored, olympic_mean
from tests.conftest import write_mllog

# seven resnet runs in time order, each faster than the one before: the windows of five score 10, 9 and 8
# minutes; the fastest is the last, the median the middle one
MINUTES = [12.0, 11.0, 10.0, 9.0, 8.0, 7.0, 6.0]
START = 1_700_000_000_000


def _olympic(minutes: list[float | None]) -> float | None:
    return olympic_mean("resnet", minutes).minutes


def _runs(minutes: list[float | None]) -> list[dict]:
    return [{"key": str(i), "run_start_ms": START + i * 3_600_000, "minutes": m} for i, m in enumerate(minutes)]


def test_the_median_window_is_chosen_not_the_fastest() -> None:
    chosen = median_window.choose(list(reversed(_runs(MINUTES))), 5, _olympic)  # in any order: by run_start
    assert [w["score"] for w in chosen["windows"]] == [10.0, 9.0, 8.0]
    assert (chosen["chosen"], chosen["fastest"]) == (1, 2)
    assert chosen["chosen_keys"] == ["1", "2", "3", "4", "5"] and (chosen["ran"], chosen["kept"]) == (7, 5)


def test_failed_runs_count_as_infinite_and_two_middle_windows_take_the_slower() -> None:
    # a failed run is the dropped slowest; two in one window of five make it invalid (infinitely slow)
    chosen = median_window.choose(_runs([None, None, 10.0, 10.0, 10.0, 10.0, 10.0]), 5, _olympic)
    assert [w["score"] for w in chosen["windows"]] == [None, 10.0, 10.0] and chosen["chosen"] == 2
    # two windows: the slower of the two middle ones (10.0, not 9.67)
    chosen = median_window.choose(_runs([12.0, 10.0, 10.0, 10.0, 9.0, 9.0]), 5, _olympic)
    assert [w["score"] for w in chosen["windows"]] == pytest.approx([10.0, 29 / 3]) and chosen["chosen"] == 0
    with pytest.raises(ValueError, match="fewer than the 5"):
        median_window.choose(_runs([1.0] * 4), 5, _olympic)


def test_the_score_step_scores_the_median_window(tmp_path: Path) -> None:
    files = [write_mllog(tmp_path / str(i) / "result.txt", "resnet", START + i * 3_600_000, m, seed=i)
             for i, m in enumerate(MINUTES)]
    scored = _scored("resnet", files, 5, None, "open")
    assert scored["minutes"] == pytest.approx(9.0) and len(scored["runs"]) == 5
    assert scored["selection"]["chosen_keys"] == [str(f) for f in files[1:6]]
    assert _scored("resnet", files[:5], 5, None, "open").get("selection") is None  # N runs: nothing to choose


def _package(tmp_path: Path, packaged: list[int], selection: dict, launched: int = 7, runs_to_run: int = 7,
             dropped: tuple[int, ...] = ()) -> Path:
    """A package of the resnet runs ``packaged`` (of ``launched`` in the ledger, less those ``dropped`` from it) with
    its provenance manifest and the config's runs_to_run."""
    org = tmp_path / "org"
    runs, ledger = [], []
    for i in range(launched):
        start = START + i * 3_600_000
        data = write_mllog(tmp_path / "runs" / str(i) / "result.txt", "resnet", start, MINUTES[i], seed=i).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        run_dir = f"runs/sys/resnet/{i}"
        if i not in dropped:
            ledger.append({"launch": f"l{i}", "status": "success", "seed": i, "result_sha256": sha, "run_dir": run_dir,
                           "start": (start - 10_000) / 1000, "stop": (start + MINUTES[i] * 60_000 + 1000) / 1000})
        if i in packaged:
            n = len(runs)
            (org / "results" / "sys" / "resnet").mkdir(parents=True, exist_ok=True)
            (org / "results" / "sys" / "resnet" / f"result_{n}.txt").write_bytes(data)
            runs.append({"file": f"results/sys/resnet/result_{n}.txt", "launch": f"l{i}", "seed": i,
                         "result_sha256": sha, "run_dir": run_dir, "run_start_ms": start,
                         "run_stop_ms": start + round(MINUTES[i] * 60_000)})
    provenance.write(org, {"files": provenance.package_files(org), "runs": runs, "ledger": ledger,
                           "selections": {"sys": {"resnet": selection}}, "git": {"commit": "x", "dirty": False},
                           "config": {"benchmarks": {"resnet": {"runs": 5, "runs_to_run": runs_to_run}}}})
    return org


def _errors(org: Path) -> list[tuple[str, str]]:
    check = audit_manifest.verify(org)
    return [(f.kind, f.message) for f in check.findings if f.severity == "error"]


def test_the_audit_checks_a_ledger_against_its_chosen_window(tmp_path: Path) -> None:
    honest = median_window.choose(_runs(MINUTES), 5, _olympic)
    org = _package(tmp_path / "honest", [1, 2, 3, 4, 5], honest)
    check = audit_manifest.verify(org)
    assert check.verified, _errors(org)
    outside = [f.path for f in check.findings if f.kind == "run outside the chosen window"]
    assert outside == ["runs/sys/resnet/0", "runs/sys/resnet/6"]  # notes, not warnings: the rules allow them
    # the fastest window packaged, its selection claiming it chosen: the audit recomputes the median
    fastest = {**honest, "chosen": 2, "chosen_keys": ["2", "3", "4", "5", "6"]}
    kinds = {k for k, _ in _errors(_package(tmp_path / "fastest", [2, 3, 4, 5, 6], fastest))}
    assert kinds == {"chosen window is not the median one", "package differs from its chosen window"}
    # the same, with the two slow first runs left out of the selection so that the fastest window is the median
    hidden = median_window.choose(_runs(MINUTES)[2:], 5, _olympic)
    assert hidden["chosen_keys"] == ["2", "3", "4", "5", "6"]
    errors = _errors(_package(tmp_path / "hidden", [2, 3, 4, 5, 6], hidden))
    assert [k for k, _ in errors] == ["launched run left out of the selection"] * 2 + [
        "selection differs from runs_to_run"]
    assert "run 0 of the ledger succeeded" in errors[0][1] and "run 1 of the ledger" in errors[1][1]
    # a selection whose run 0 claims a start two hours later, outside its launch (which reorders the windows)
    moved = {**honest, "runs": [{**r, "run_start_ms": r["run_start_ms"] + 7_200_000} if r["key"] == "0" else r
                                for r in honest["runs"]]}
    errors = _errors(_package(tmp_path / "moved", [1, 2, 3, 4, 5], moved))
    assert ("time differs from the ledger", "results/sys/resnet: run 0's recorded run (start "
            f"{START + 7_200_000} ms, 12.0 min) lies outside its launch ({(START - 10_000) / 1000:.0f} to "
            f"{(START + 12 * 60_000 + 1000) / 1000:.0f} s since the epoch)") in errors


def test_m_over_n_the_config_the_selection_and_the_ledger_agree(tmp_path: Path) -> None:
    """Issue 43: runs 0 and 1 dropped from the ledger and the selection alike, so that the median of what is left is
    the fastest window: runs_to_run (7) says two runs are missing from both."""
    hidden = median_window.choose(_runs(MINUTES)[2:], 5, _olympic)
    errors = _errors(_package(tmp_path / "dropped", [2, 3, 4, 5, 6], hidden, dropped=(0, 1)))
    assert ("selection differs from runs_to_run", "results/sys/resnet: runs_to_run is 7 (runs 0 to 6), the selection "
            "holds runs ['2', '3', '4', '5', '6']") in errors
    assert ("ledger differs from runs_to_run", "results/sys/resnet: runs_to_run is 7, the ledger launched run folders "
            "['2', '3', '4', '5', '6']: missing ['0', '1']") in errors
    # runs_to_run rewritten to 5 disagrees with the run folders; renumbered as well, a package rewritten whole agrees
    # with itself: only its published manifest hash (manifest_sha256) binds it (docs/security.md)
    assert _errors(_package(tmp_path / "rewritten", [2, 3, 4, 5, 6], hidden, dropped=(0, 1), runs_to_run=5)) == [
        ("selection differs from runs_to_run", "results/sys/resnet: runs_to_run is 5 (runs 0 to 4), the selection "
         "holds runs ['2', '3', '4', '5', '6']"),
        ("ledger differs from runs_to_run", "results/sys/resnet: runs_to_run is 5, the ledger launched run folders "
         "['2', '3', '4', '5', '6']: missing ['0', '1']; beyond ['5', '6']")]
