"""MLPerf Training scoring of the pipeline's own runs: the olympic mean of a benchmark's runs
(``mlrepro.core.olympic``) times the RCP factor the audit's RCP check computes (closed division).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mlrepro.core import atomic, integrity, median_window
from mlrepro.core.job import Job
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


def job(job: Job) -> None:
    """rules/score.smk: params runs ({system: {benchmark: [result files in run order]}}), keep ({benchmark: N}: of
    more runs, the median window of N is scored), ruleset and division (the RCP normalisation, closed division).
    Each result is checked against the result_sha256 of the run.json beside it first; the table is
    {system: {benchmark: score}}."""
    runs = {s: {b: [Path(f) for f in files] for b, files in benchmarks.items()}
            for s, benchmarks in job.params["runs"].items()}
    integrity.verify_results(f for benchmarks in runs.values() for files in benchmarks.values() for f in files)
    keep, ruleset, division = job.params["keep"], job.params["ruleset"], job.params["division"]
    atomic.write_json(job.output.first, {s: {b: _scored(b, files, keep.get(b), ruleset, division)
                                             for b, files in benchmarks.items()} for s, benchmarks in runs.items()})


def _scored(benchmark: str, files: list[Path], keep: int | None, ruleset: str | None, division: str) -> dict[str, Any]:
    """``score_files`` of the runs a package holds: of more than ``keep``, the median window (its record beside)."""
    if keep is None or len(files) <= keep:
        return score_files(benchmark, files, ruleset, division)
    selection = median_window.choose([median_window.window_run(str(f), f) for f in files], keep,
                                     lambda minutes: olympic_mean(benchmark, minutes).minutes)
    return {**score_files(benchmark, [Path(k) for k in selection["chosen_keys"]], ruleset, division),
            "selection": selection}
