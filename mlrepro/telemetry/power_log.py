"""MLPerf-style ``power_reading`` events from NVML samples, in a log of their own.

These are accelerator readings only (the sum of the GPUs' instantaneous power), not the node wall
power MLPerf's power rules measure; every event says so in its metadata, and the file must never be
submitted or summarised as an MLPerf power result.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from mlrepro.core import atomic
from mlrepro.telemetry.store import HOST_DEVICE, read_samples

SCOPE = "accelerators only (NVML instantaneous power, summed over GPUs); not node wall power"


def _line(time_ms: int, key: str, event_type: str, value: float | None, metadata: dict[str, object]) -> str:
    event = {
        "namespace": "",
        "time_ms": int(time_ms),
        "event_type": event_type,
        "key": key,
        "value": value,
        "metadata": {"file": __file__, "lineno": 0, **metadata},
    }
    return ":::MLLOG " + json.dumps(event)


def write_power_log(
    out_dir: Path,
    path: Path,
    run_start_ms: int,
    run_stop_ms: int,
    bin_ms: int = 1000,
    host: str | None = None,
) -> int:
    """Write ``path`` (atomically): power_measurement_start/stop at the run window's edges and one
    power_reading (W, mean over ``bin_ms``) per bin in which every GPU was sampled. Returns the count."""
    table, _ = read_samples(Path(out_dir))
    table = table.filter(pc.invert(pc.equal(table["device"], HOST_DEVICE)))
    t_all = table["time_ms"]
    table = table.filter(pc.and_(pc.greater_equal(t_all, run_start_ms), pc.less_equal(t_all, run_stop_ms)))
    gpus = sorted(set(table["device"].to_pylist()))
    meta = {"host": host or socket.gethostname(), "scope": SCOPE, "unit": "W", "gpus": len(gpus)}
    lines = [_line(run_start_ms, "power_measurement_start", "INTERVAL_START", None, meta)]
    t = table["time_ms"].to_numpy()
    p = table["power_instant_mw"].to_numpy(zero_copy_only=False).astype(float)
    dev = np.array(table["device"].to_pylist(), dtype=object)
    count = 0
    for lo in range(run_start_ms, run_stop_ms, bin_ms):
        hi = min(lo + bin_ms, run_stop_ms)
        sel = (t >= lo) & (t < hi) & ~np.isnan(p)
        means = [p[sel & (dev == g)].mean() for g in gpus if (sel & (dev == g)).any()]
        if gpus and len(means) == len(gpus):
            lines.append(_line(hi, "power_reading", "POINT_IN_TIME", round(sum(means) / 1e3, 3), meta))
            count += 1
    lines.append(_line(run_stop_ms, "power_measurement_stop", "INTERVAL_END", None, meta))
    atomic.write_text(path, "\n".join(lines) + "\n")
    return count
