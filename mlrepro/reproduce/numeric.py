"""The numeric reproduction verdict: how close the reproduced runs come to the submitted ones, per quantity.

* time to train: the ratio of the reproduced runs' score to the submitted score (each the olympic mean
  where it has one, else the plain mean), with a 95% bootstrap interval (percentile, 10,000 resamples
  of each side's runs, seeded); it decides where the hardware is comparable and each side has at
  least 3 converged runs: *not reproduced* when the whole interval lies outside the tolerance;
* time per epoch (or sample, as the benchmark counts convergence): minutes over epochs to converge,
  the throughput ratio with its interval, beside it (a run that converges in fewer epochs trains no
  faster per epoch);
* epochs (or samples) to converge against the RCP of the batch size: the official RCP checker's
  decision and its one-sided t-test p-value (``_find_p_value`` with the RCP's olympic mean and
  spread); it decides with at least 3 reproduced runs where an RCP is found or interpolated;
* initialisation time (run_start - init_start): the ratio and its interval, reported only (untimed).

The tolerance (``reproduce_tolerance``, a fraction) defaults to the variance MLCommons publishes:
+/-2.5% for the imaging benchmarks, +/-5% for the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

IMAGING = frozenset({"resnet", "ssd", "retinanet", "maskrcnn", "unet3d"})
RESAMPLES = 10_000
MIN_RUNS = 3  # fewer converged runs on a side: the interval is reported, it does not decide
_SEED = 20220629  # the bootstrap is seeded: a report is the same every time it is made


def default_tolerance(benchmark: str) -> float:
    return 0.025 if benchmark in IMAGING else 0.05


def _score(benchmark: str) -> Callable[[np.ndarray], np.ndarray]:
    """The score of each row of runs: the olympic mean (score.olympic_mean's drop) where a row has runs to
    spare, else the plain mean."""
    from mlrepro.score import max_dropped

    drop = max_dropped(benchmark)

    def score(rows: np.ndarray) -> np.ndarray:
        if rows.shape[1] <= 2 * drop:
            return rows.mean(axis=1)
        return np.sort(rows, axis=1)[:, drop:rows.shape[1] - drop].mean(axis=1)

    return score


def _mean(rows: np.ndarray) -> np.ndarray:
    return rows.mean(axis=1)


def ratio(submitted: Sequence[float], reproduced: Sequence[float], stat: Callable[[np.ndarray], np.ndarray]
          ) -> dict[str, Any] | None:
    """stat(reproduced) / stat(submitted) with its 95% percentile bootstrap interval (None: a side is empty);
    ``stat`` maps each row of a 2-D array of runs to a number."""
    sub, rep = np.asarray(submitted, dtype=float), np.asarray(reproduced, dtype=float)
    if not sub.size or not rep.size:
        return None
    point = float(stat(rep[None, :])[0] / stat(sub[None, :])[0])
    if not np.isfinite(point):
        return None
    rng = np.random.default_rng(_SEED)
    with np.errstate(divide="ignore", invalid="ignore"):
        samples = stat(rng.choice(rep, (RESAMPLES, rep.size))) / stat(rng.choice(sub, (RESAMPLES, sub.size)))
    low, high = np.percentile(samples, [2.5, 97.5])
    return {"ratio": point, "low": float(low), "high": float(high), "n_submitted": int(sub.size),
            "n_reproduced": int(rep.size)}


def _pct(x: float) -> str:
    return f"{(x - 1) * 100:+.1f}%"


def time_verdict(r: dict[str, Any] | None, tolerance: float, decides: bool) -> tuple[str, str | None]:
    """(the verdict's time clause, a reason for *not reproduced* or None)."""
    if r is None:
        return "time to train not compared (no converged runs on a side)", None
    interval = f"95% interval [{_pct(r['low'])}, {_pct(r['high'])}]"
    off = abs(r["ratio"] - 1) * 100
    if r["low"] > 1 + tolerance or r["high"] < 1 - tolerance:
        clause = (f"time to train {off:.1f}% {'longer' if r['ratio'] > 1 else 'shorter'} than the submitted score "
                  f"({interval}), beyond the {tolerance:.1%} tolerance")
        return clause, clause if decides else None
    if 1 - tolerance <= r["low"] and r["high"] <= 1 + tolerance:
        return f"time to train within {off:.1f}% ({interval}) of the submitted score", None
    return (f"time to train within {off:.1f}% ({interval}) of the submitted score; the interval reaches past the "
            f"{tolerance:.1%} tolerance, so the difference is not resolved", None)


def rcp_test(benchmark: str, division: str, ruleset: str, bs: Any, epochs: list[float]) -> dict[str, Any]:
    """The official RCP check of ``epochs`` and its p-value (the checker's one-sided t-test)."""
    from mlrepro.audit import rcp

    if not rcp.applies(ruleset, division, benchmark):
        return {"applies": False, "passed": None, "p": None,
                "message": f"the RCP rule applies to the closed division only (this is {division})"}
    try:
        checker = rcp._reference("training", ruleset, benchmark)
        passed, message, _, _ = rcp._decide(checker, bs, list(epochs))
        record = _record(checker, bs, message)
    except Exception as e:  # no RCP data for this benchmark in the release, a batch size of the wrong type
        return {"applies": True, "passed": None, "message": f"{type(e).__name__}: {e}", "p": None}
    out: dict[str, Any] = {"applies": True, "passed": passed, "message": message, "p": None, "bs": bs}
    drop = 4 if benchmark == "unet3d" else 1
    kept = sorted(epochs)[drop:len(epochs) - drop]
    if record is not None and kept:
        ref = sorted(record["Epochs to converge"])
        n_ref = len(ref) - 2 * drop
        _, p = checker._find_p_value(float(np.mean(kept)), record["RCP Stdev"], len(kept), record["RCP Mean"],
                                     record["RCP Stdev"], n_ref)
        out.update(p=float(p), rcp_mean=float(record["RCP Mean"]), mean=float(np.mean(kept)))
    return out


def _record(checker: Any, bs: Any, message: str) -> dict[str, Any] | None:
    """The RCP record the decision used: found, or interpolated (none for the other outcomes)."""
    if message == "RCP found":
        return checker._find_rcp(bs, "pruned_rcps")
    if message == "RCP Interpolation":
        low, high = checker._find_top_min_rcp(bs, "pruned_rcps"), checker._find_bottom_max_rcp(bs, "pruned_rcps")
        return checker._create_interp_rcp(bs, low, high)[1]
    return None


def rcp_verdict(test: dict[str, Any], n_reproduced: int) -> tuple[str, str | None]:
    """(the verdict's convergence clause, a reason for *not reproduced* or None)."""
    p = f" (p = {test['p']:.3g})" if test.get("p") is not None else ""
    if not test.get("applies"):
        return f"convergence not tested against an RCP: {test['message']}", None
    if test.get("message") not in ("RCP found", "RCP Interpolation"):
        return f"convergence not tested against an RCP: {test.get('message')}", None
    if test["passed"]:
        return f"convergence consistent with the RCP{p}", None
    clause = f"convergence faster than the RCP allows{p}"
    return clause, clause if n_reproduced >= MIN_RUNS else None


def assess(benchmark: str, submitted: list[dict[str, Any]], reproduced: list[dict[str, Any]], *, division: str,
           ruleset: str, bs: Any, tolerance: float | None, hardware_comparable: bool) -> dict[str, Any]:
    """The numeric comparison; runs are {"minutes", "epochs", "init_minutes"} (None where not logged)."""
    tol = default_tolerance(benchmark) if tolerance is None else tolerance
    score = _score(benchmark)
    sub_t = [r["minutes"] for r in submitted if r["minutes"] is not None]
    rep_t = [r["minutes"] for r in reproduced if r["minutes"] is not None]
    time = ratio(sub_t, rep_t, score)
    decides = hardware_comparable and len(sub_t) >= MIN_RUNS and len(rep_t) >= MIN_RUNS
    time_clause, time_reason = time_verdict(time, tol, decides)

    def per_epoch(runs: list[dict[str, Any]]) -> list[float]:
        return [r["minutes"] / r["epochs"] for r in runs if r["minutes"] is not None and r.get("epochs")]

    throughput = ratio(per_epoch(submitted), per_epoch(reproduced), _mean)
    if throughput is not None:  # time per epoch -> epochs per minute: the inverse ratio, its interval turned
        throughput = {**throughput, "ratio": 1 / throughput["ratio"], "low": 1 / throughput["high"],
                      "high": 1 / throughput["low"]}
    init = ratio([r["init_minutes"] for r in submitted if r.get("init_minutes") is not None],
                 [r["init_minutes"] for r in reproduced if r.get("init_minutes") is not None], _mean)
    rep_epochs = [r["epochs"] for r in reproduced if r["minutes"] is not None and r.get("epochs") is not None]
    rcp = rcp_test(benchmark, division, ruleset, bs, rep_epochs)
    rcp_clause, rcp_reason = rcp_verdict(rcp, len(rep_epochs))
    notes = []
    if not hardware_comparable:
        notes.append("the hardware differs: the time to train is reported, it does not decide")
    elif not decides:
        notes.append(f"fewer than {MIN_RUNS} converged runs on a side: the interval is reported, it does not decide")
    return {"tolerance": tol, "time_to_train": time, "throughput": throughput, "init_time": init, "rcp": rcp,
            "time_decides": decides, "line": f"{time_clause}; {rcp_clause}", "notes": notes,
            "reasons": [r for r in (time_reason, rcp_reason) if r]}
