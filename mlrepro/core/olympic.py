"""MLPerf Training scoring arithmetic: the olympic mean of a benchmark's runs.

The rules (training_policies, "Benchmark Results"): sort the N times to train, drop the fastest
and the slowest (unet3d: four of each; of three runs the middle one is left) and average the rest.
A run that did not converge counts as a dropped slowest run; more such runs than may be dropped
invalidate the benchmark. This is the arithmetic of
``mlperf_logging.result_summarizer._compute_olympic_average``, kept here so that scoring does not
depend on the summarizer's crashes (KeyError on dlrm/minigo for rulesets 1.x/2.x).
The submitter's score (``mlrepro.score``) and the audit's (``mlrepro.audit.scoring``) both use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mlrepro.core import rulesets


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
