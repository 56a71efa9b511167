"""The telemetry of one run for the report: charts over the run window and warnings worth a row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from markupsafe import Markup

from mlrepro.report import svg
from mlrepro.telemetry.series import series
from mlrepro.telemetry.store import NODES_DIR, host_folder


def _points(t0: int, times: list[int], values: list[float | None]) -> list[tuple[float, float]]:
    return [((t - t0) / 1000, v) for t, v in zip(times, values, strict=True) if v is not None]


def telemetry_charts(run_dir: Path, run: dict[str, Any]) -> list[Markup]:
    """Host CPU and, per GPU, power, utilisation and SM clock, with eval markers and the run window; a run over
    several nodes: the same for each other node, its host name in the titles."""
    folder = run_dir / "telemetry"
    if not folder.is_dir() or "run_start_ms" not in run:
        return []
    t0, t1 = run["run_start_ms"], run["run_stop_ms"]
    marks = [(0.0, "run_start"), ((t1 - t0) / 1000, "run_stop")]
    marks += [(m["time_ms"] / 1000, f"eval {m['epoch']}") for m in run.get("metrics", [])]
    charts = _charts(folder, t0, t1, marks, "")
    for node in ((run.get("telemetry") or {}).get("hosts") or [])[1:]:
        try:
            node_dir = folder / NODES_DIR / host_folder(node["host"])
        except ValueError:
            continue  # named in the summary's reasons
        if node_dir.is_dir():
            charts += _charts(node_dir, t0, t1, marks, f" on {node['host']}")
    return charts


def _charts(folder: Path, t0: int, t1: int, marks: list[tuple[float, str]], where: str) -> list[Markup]:
    data = series(folder, t0 - 2000, t1 + 2000)
    charts = []
    if data["host"]:
        h = data["host"]
        charts.append(svg.line_chart(
            {"host CPU %": _points(t0, h["time_ms"], h["cpu_pct"]),
             "run CPU % of a core": _points(t0, h["time_ms"], h["proc_cpu_pct"])},
            title=f"host CPU{where}", x_label="seconds since run_start", y_label="%", vlines=marks, markers=False,
            width=560, height=220))
    for uuid, g in data["gpus"].items():
        for key, label in (("power_w", "power (W)"), ("util_pct", "utilisation (%)"), ("sm_clock_mhz", "SM MHz")):
            charts.append(svg.line_chart({uuid: _points(t0, g["time_ms"], g[key])}, title=f"GPU {label}{where}",
                                         x_label="seconds since run_start", y_label=label, vlines=marks,
                                         markers=False, width=560, height=220))
    return charts


def warnings(summary: dict[str, Any] | None) -> list[str]:
    """What deserves a warning row: no NVML, throttling, XID errors, GPUs without an energy counter."""
    if not summary:
        return ["no telemetry recorded"]
    rows = list(summary.get("reasons", []))
    for gpu in summary.get("gpus", []):
        throttled = (gpu.get("throttle") or {}).get("throttled_pct")
        if throttled:
            rows.append(f"GPU {gpu.get('uuid')}: throttled {throttled}% of the run")
        if gpu.get("energy_counter_j") is None:
            source = gpu.get("energy_source") or "nothing"
            rows.append(f"GPU {gpu.get('uuid')}: no energy counter; energy from {source}")
    return list(dict.fromkeys(rows))
