"""MLPerf Training scoring: the olympic mean of a benchmark's runs.

The rules (training_policies, "Benchmark Results"): sort the N times to train, drop the fastest
and the slowest (unet3d: four of each; of three runs the middle one is left) and average the
rest. A run that did not converge counts as a dropped slowest run; more such runs than may be
dropped invalidate the benchmark. This is the
arithmetic of ``mlperf_logging.result_summarizer._compute_olympic_average``, kept here so that
scoring does not depend on the summarizer's crashes (KeyError on dlrm/minigo for rulesets 1.x/2.x).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlrepro.core import atomic, integrity, mllog_reader, rulesets


def max_dropped(benchmark: str) -> int:
    """Runs dropped at each end (the rules' table, mlrepro/core/rulesets.yaml: unet3d 4, others 1)."""
    return rulesets.rules(benchmark).dropped


@dataclass(frozen=True)
class Score:
    benchmark: str
    minutes: float | None  # None when the benchmark is invalid or has too few runs
    converged: int
    failed: int
    reason: str  # empty when valid


def olympic_mean(benchmark: str, minutes: Sequence[float | None], scaling_factor: float = 1.0) -> Score:
    """Score ``minutes`` (one entry per run; None for a run that failed or did not converge)."""
    drop = max_dropped(benchmark)
    ok = sorted(m for m in minutes if m is not None)
    failed = len(minutes) - len(ok)
    if failed > drop:
        return Score(benchmark, None, len(ok), failed,
                     f"{failed} runs failed or did not converge; at most {drop} may be dropped")
    countable = ok[drop : len(ok) - (drop - failed)]
    if not countable:
        return Score(benchmark, None, len(ok), failed, f"too few runs ({len(minutes)}) to drop {drop} of each end")
    return Score(benchmark, sum(countable) * 1.0 / len(countable) * scaling_factor, len(ok), failed, "")


def run_minutes(result: Path) -> tuple[float | None, str | None]:
    """(time to train in minutes, run_stop status) of one result file; minutes is None unless it converged."""
    start, stop = mllog_reader.run_window(result)
    status = mllog_reader.run_status(result)
    return ((stop - start) / 60 / 1000 if status == "success" else None), status


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
    args = p.parse_args(argv)
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
    atomic.write_json(args.out, {s: {b: score_files(b, files, args.ruleset, args.division)
                                     for b, files in benchmarks.items()} for s, benchmarks in by_unit.items()})


if __name__ == "__main__":
    main()
