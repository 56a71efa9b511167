"""M > N runs: the N consecutive runs whose olympic score is the median, as the training rules define it.

The rules (training_policies, since v5.0): a submitter may run M > N runs and submit the N consecutive
runs, by time, whose olympic score is the median of those of every window of N consecutive runs; a
failed run (one that did not converge) counts as infinitely slow; keeping all M logs is recommended.
Running several sets of N and picking the best is forbidden. Here the runs are ordered by their
run_start, each of the M - N + 1 windows is scored by ``core.olympic.olympic_mean`` (a failed run is the
dropped slowest; a window with more failures than may be dropped scores infinity), the windows are
ranked by score (ties: the earlier window first) and the median is chosen; with an even number of
windows, the slower of the two middle ones (never the choice that favours the submitter).

The score step, the package step and the audit (a package's ledger against its chosen window) call
:func:`choose` on the same records with ``core.olympic.olympic_mean``, so all three agree by construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mlrepro.core import mllog_reader

RULE = ("the N consecutive runs (by run_start) whose olympic score is the median of every window's, "
        "failed runs counting as infinite; of two middle windows, the slower")


def choose(runs: Sequence[dict[str, Any]], keep: int, score: Callable[[list[float | None]], float | None]
           ) -> dict[str, Any]:
    """``runs``: {"key", "run_start_ms", "minutes" (None: failed)}, any order; ``score``: a window's olympic
    score from its minutes (None: invalid); the selection record: the runs in time order, every window's
    score and the chosen window's first position and keys."""
    order = sorted(runs, key=lambda r: (r["run_start_ms"] is None, r["run_start_ms"] or 0, str(r["key"])))
    if len(order) < keep:
        raise ValueError(f"{len(order)} runs, fewer than the {keep} a submission holds")
    windows = []
    for first in range(len(order) - keep + 1):
        value = score([r["minutes"] for r in order[first:first + keep]])
        windows.append({"first": first, "score": math.inf if value is None else float(value)})
    ranked = sorted(windows, key=lambda w: (w["score"], w["first"]))
    chosen = ranked[len(ranked) // 2]["first"]
    return {"rule": RULE, "ran": len(order), "kept": keep,
            "runs": [{"key": r["key"], "run_start_ms": r["run_start_ms"], "minutes": r["minutes"]} for r in order],
            "windows": [{**w, "score": None if math.isinf(w["score"]) else w["score"]} for w in windows],
            "chosen": chosen, "chosen_keys": [r["key"] for r in order[chosen:chosen + keep]],
            "fastest": min(windows, key=lambda w: (w["score"], w["first"]))["first"]}


def window_run(key: str, result: Path) -> dict[str, Any]:
    """A run as median_window.choose takes it: its run_start and minutes (None unless it converged)."""
    try:
        start: int | None = mllog_reader.run_window(result)[0]
    except ValueError:  # no run_start or run_stop: it did not converge, and has no place in time
        start = None
    minutes = mllog_reader.run_minutes(result)[0] if start is not None else None
    return {"key": key, "run_start_ms": start, "minutes": minutes}
