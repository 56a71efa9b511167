"""Energy and time-fraction arithmetic over sampled series, restricted to a run window [start, stop].

All inputs are sorted times in ms with their values, missing values already dropped. Window edges
are linearly interpolated between the samples around them; the part of the window no samples
bracket is not extrapolated but reported as missing coverage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Array = np.ndarray


def clip(t: Array, v: Array, start: float, stop: float) -> tuple[Array, Array]:
    """The series inside [start, stop], with interpolated points at the edges the samples bracket."""
    if len(t) == 0 or stop <= start or t[-1] < start or t[0] > stop:
        return np.empty(0), np.empty(0)
    a, b = max(start, t[0]), min(stop, t[-1])
    inside = (t > a) & (t < b)
    tt = np.concatenate(([a], t[inside], [b]))
    vv = np.concatenate(([np.interp(a, t, v)], v[inside], [np.interp(b, t, v)]))
    return tt, vv


def trapezoid(t: Array, v: Array) -> float:
    return float(np.sum((v[1:] + v[:-1]) * np.diff(t)) / 2) if len(t) > 1 else 0.0


def power_integral_j(t_ms: Array, p_mw: Array, start: float, stop: float) -> tuple[float, float]:
    """(energy in J, ms covered) of instantaneous power by the trapezoid rule."""
    tt, pp = clip(t_ms, p_mw, start, stop)
    return trapezoid(tt, pp) * 1e-6, float(tt[-1] - tt[0]) if len(tt) else 0.0  # mW * ms = 1e-6 J


@dataclass
class CounterEnergy:
    energy_j: float
    covered_ms: float
    resets: int
    gap_j: float  # energy across counter resets, not measured by the counter itself
    gap_source: str | None  # "power integral" or "counter after reset (lower bound)"


def counter_energy_j(
    t_ms: Array,
    e_mj: Array,
    start: float,
    stop: float,
    p_t_ms: Array | None = None,
    p_mw: Array | None = None,
) -> CounterEnergy:
    """Energy from a cumulative counter, split into segments where it went backwards (driver reload or
    GPU reset). Between the last sample before a reset and the first after it, the counter says
    nothing: that gap is filled by the power integral when power covers it, else by the counter's
    value after the reset (what it counted since the reset: a lower bound)."""
    cuts = np.nonzero(np.diff(e_mj) < 0)[0] + 1
    segments = np.split(np.arange(len(t_ms)), cuts)
    total_mj = covered = gap_j = 0.0
    sources: set[str] = set()
    resets = 0
    for k, idx in enumerate(segments):
        tt, ee = clip(t_ms[idx], e_mj[idx], start, stop)
        if len(tt):
            total_mj += float(ee[-1] - ee[0])
            covered += float(tt[-1] - tt[0])
        if k == 0:
            continue
        a, b = t_ms[idx[0] - 1], t_ms[idx[0]]  # the gap around this reset
        lo, hi = max(a, start), min(b, stop)
        if hi <= lo:
            continue
        resets += 1
        covered += hi - lo
        j, cov = (0.0, 0.0)
        if p_t_ms is not None and p_mw is not None:
            j, cov = power_integral_j(p_t_ms, p_mw, lo, hi)
        if cov >= 0.99 * (hi - lo):
            gap_j += j
            sources.add("power integral")
        else:
            gap_j += float(e_mj[idx[0]]) * 1e-3 * (hi - lo) / (b - a)
            sources.add("counter after reset (lower bound)")
    return CounterEnergy(total_mj * 1e-3 + gap_j, covered, resets, gap_j, ", ".join(sorted(sources)) or None)


def counter_delta(t_ms: Array, c: Array, start: float, stop: float) -> tuple[float, float]:
    """(increase, ms covered) of a cumulative counter over the window; backward steps count as 0."""
    cuts = np.nonzero(np.diff(c) < 0)[0] + 1
    total = covered = 0.0
    for idx in np.split(np.arange(len(t_ms)), cuts):
        tt, cc = clip(t_ms[idx], c[idx], start, stop)
        if len(tt):
            total += float(cc[-1] - cc[0])
            covered += float(tt[-1] - tt[0])
    return total, covered


def held_durations(t_ms: Array, start: float, stop: float, hold_ms: float) -> Array:
    """How long each snapshot sample stands for inside the window: from its time to the next
    sample's (at most ``hold_ms``), clipped to the window. For bitmasks that cannot be interpolated."""
    if len(t_ms) == 0:
        return np.empty(0)
    ends = np.minimum(np.append(t_ms[1:], t_ms[-1] + hold_ms), t_ms + hold_ms)
    return np.clip(np.minimum(ends, stop) - np.maximum(t_ms, start), 0, None)
