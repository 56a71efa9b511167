"""Time series for the report's plots: host CPU and RSS, and per GPU power, utilisation and SM clock.

Plain lists, one entry per sample, ``None`` where a value is missing; ``time_ms`` is mllog's clock,
so subtract run_start_ms for time into the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlrepro.telemetry.store import HOST_DEVICE, Samples, read_samples, read_sidecar

HOST_SERIES = {"host_cpu_pct": "cpu_pct", "proc_cpu_pct": "proc_cpu_pct", "proc_rss_bytes": "rss_mb"}
GPU_SERIES = {"power_instant_mw": "power_w", "util_gpu_pct": "util_pct", "sm_clock_mhz": "sm_clock_mhz"}
_SCALE = {"rss_mb": 1 / 2**20, "power_w": 1e-3}


def _columns(samples: Samples, device: str, wanted: dict[str, str]) -> dict[str, list[Any]]:
    sub = samples.of(device)
    out: dict[str, list[Any]] = {"time_ms": sub.column("time_ms")}
    for col, name in wanted.items():
        k = _SCALE.get(name, 1.0)
        out[name] = [None if v is None else v * k for v in sub.column(col)]
    return out


def series(out_dir: Path, start_ms: int | None = None, stop_ms: int | None = None) -> dict[str, Any]:
    """``{"host": {"time_ms": [...], "cpu_pct": [...], "proc_cpu_pct": [...], "rss_mb": [...]} | None,
    "gpus": {uuid: {"time_ms": [...], "power_w": [...], "util_pct": [...], "sm_clock_mhz": [...]}},
    "complete": bool, "hostname": str | None}``, optionally cut to [start_ms, stop_ms]: the samples of one node, whose
    host name its sampler recorded (a run over several nodes has a folder per node). Power is the instantaneous
    field (186)."""
    table, complete = read_samples(Path(out_dir))
    table = table.between(start_ms, stop_ms)
    devices = sorted(table.devices())
    return {
        "host": _columns(table, HOST_DEVICE, HOST_SERIES) if HOST_DEVICE in devices else None,
        "gpus": {d: _columns(table, d, GPU_SERIES) for d in devices if d != HOST_DEVICE},
        "complete": complete,
        "hostname": ((read_sidecar(Path(out_dir)) or {}).get("host") or {}).get("hostname"),
    }
