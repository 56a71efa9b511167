"""MLPerf Training scoring of the pipeline's own runs: the olympic mean of a benchmark's runs
(``mlrepro.core.olympic``) times the RCP factor the audit's RCP check computes (closed division).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mlrepro.core import atomic, integrity, median_window
from mlrepro.core.mllog_reader import run_minutes
from mlrepro.core.olympic import Score, max_dropped, olympic_mean

__all__ = ["Score", "max_dropped", "olympic_mean", "rcp_factor", "run_minutes", "score_files"]


def rcp_factor(benchmark: str, results: Sequence[Path], ruleset: str, division: str,
               usage: str = "training") -> tuple[float, dict[str, Any] | None]:
    """The RCP normalisation factor a published score carries, as the audit computes it.

    MLPerf publishes the olympic mean times the factor the RCP check writes to ``scaling.json``
    (closed division, runs converging faster than the RCP mean within the allowed speedup); 1.0
    elsewhere. Returns (factor, the RCP verdict or None where no check applies).
    """
    from mlrepro.audit import rcp
    from mlrepro.audit.runfile import audit_bytes

    if not rcp.applies(ruleset, division, benchmark) or not results:
        return 1.0, None
    verdict = rcp.check([audit_bytes(p.read_bytes(), usage, ruleset) for p in results], usage, ruleset)
    factor = verdict.written_factor if verdict.written_factor is not None else 1.0
    return factor, {"passed": verdict.passed, "message": verdict.message, "label": verdict.summary_label}


def score_files(benchmark: str, results: Sequence[Path], ruleset: str | None = None,
                division: str = "open") -> dict[str, Any]:
    """The published score: the olympic mean times the RCP factor (``minutes``), and the raw mean."""
    runs = []
    for i, path in enumerate(results):
        minutes, status = run_minutes(path)
        runs.append({"index": i, "file": str(path), "minutes": minutes, "status": status})
    raw = olympic_mean(benchmark, [r["minutes"] for r in runs])
    factor, verdict = rcp_factor(benchmark, results, ruleset, division) if ruleset else (1.0, None)
    score = olympic_mean(benchmark, [r["minutes"] for r in runs], factor)
    return {**asdict(score), "raw_minutes": raw.minutes, "scaling_factor": factor, "rcp": verdict, "runs": runs}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.score", description=__doc__)
    p.add_argument("--results", nargs="+", required=True, help="SYSTEM/BENCHMARK=FILE, in run order; the table "
                   "(--out) holds {system: {benchmark: score}}")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--verify-hashes", action="store_true",
                   help="check each result against the result_sha256 of the run.json beside it first")
    p.add_argument("--ruleset", help="apply the RCP normalisation of this ruleset (closed division)")
    p.add_argument("--division", default="open", choices=["open", "closed"])
    p.add_argument("--keep", action="append", default=[], metavar="BENCHMARK=N",
                   help="of more runs than N, score the median window of N (mlrepro/core/median_window.py)")
    args = p.parse_args(argv)
    keep = {b: int(n) for b, _, n in (k.partition("=") for k in args.keep)}
    by_unit: dict[str, dict[str, list[Path]]] = {}
    for item in args.results:
        unit, _, file = item.partition("=")
        system, slash, benchmark = unit.partition("/")
        if not (slash and system and benchmark and file):
            p.error(f"--results {item!r}: expected SYSTEM/BENCHMARK=FILE")
        by_unit.setdefault(system, {}).setdefault(benchmark, []).append(Path(file))
    if args.verify_hashes:
        try:
            integrity.verify_results(f for benchmarks in by_unit.values() for files in benchmarks.values()
                                     for f in files)
        except integrity.Tampered as e:
            sys.exit(f"error: {e}")
    atomic.write_json(args.out, {s: {b: _scored(b, files, keep.get(b), args.ruleset, args.division)
                                     for b, files in benchmarks.items()} for s, benchmarks in by_unit.items()})


def _scored(benchmark: str, files: list[Path], keep: int | None, ruleset: str | None, division: str) -> dict[str, Any]:
    """``score_files`` of the runs a package holds: of more than ``keep``, the median window (its record beside)."""
    if keep is None or len(files) <= keep:
        return score_files(benchmark, files, ruleset, division)
    selection = median_window.choose([median_window.window_run(str(f), f) for f in files], keep,
                                     lambda minutes: olympic_mean(benchmark, minutes).minutes)
    return {**score_files(benchmark, [Path(k) for k in selection["chosen_keys"]], ruleset, division),
            "selection": selection}



if __name__ == "__main__":
    main()
