"""Summarise a sampler's output over one run window [run_start_ms, run_stop_ms] into summary.json.

Energy here is accelerator energy as NVML reports it: GPUs only, no CPUs, memory, fans or power
supply losses. It is labelled so, and never as an MLPerf power result (which is node wall power).
"""

from __future__ import annotations

import json
import socket
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from mlrepro.core import atomic
from mlrepro.telemetry import energy
from mlrepro.telemetry.merge import merge
from mlrepro.telemetry.store import (
    FIELDS,
    HOST_DEVICE,
    NODES,
    NODES_DIR,
    SAMPLES,
    SUMMARY,
    Samples,
    host_folder,
    read_events,
    read_samples,
    read_sidecar,
)

LABEL = "accelerator energy (NVML): GPUs only; not an MLPerf power result"
MIN_COVERAGE = 0.95

# clock-event reason bits (nvmlClocksEventReason*); GpuIdle and the two clock settings are not throttling
REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLE_MASK = 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80
COUNTERS = {
    "throttle_power_ns": "sw_power_cap",
    "throttle_sync_boost_ns": "sync_boost",
    "throttle_sw_thermal_ns": "sw_thermal_slowdown",
    "throttle_hw_thermal_ns": "hw_thermal_slowdown",
    "throttle_hw_power_brake_ns": "hw_power_brake_slowdown",
}


def _col(rows: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    """(time_ms, values) of one column with the missing (null) values dropped."""
    v = rows[name]
    ok = ~np.isnan(v)
    return rows["time_ms"][ok], v[ok]


def _arrays(samples: Samples, device: str) -> dict[str, np.ndarray]:
    sub = samples.of(device)
    out = {"time_ms": np.array(sub.column("time_ms"), dtype=float),
           "tick": np.array(sub.column("tick"), dtype=np.int64)}
    for name in FIELDS:
        out[name] = np.array(sub.column(name), dtype=float)  # None -> nan
    return out


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def _in_window(t: np.ndarray, start: float, stop: float) -> np.ndarray:
    return (t >= start) & (t <= stop)


def _ticks(rows: dict[str, np.ndarray], start: float, stop: float) -> tuple[int, int]:
    ticks = np.unique(rows["tick"][_in_window(rows["time_ms"], start, stop)])
    return len(ticks), (int(ticks[-1] - ticks[0] + 1 - len(ticks)) if len(ticks) else 0)


def _throttle(rows: dict[str, np.ndarray], start: float, stop: float, hold_ms: float) -> dict[str, Any]:
    t, masks = _col(rows, "clock_event_reasons")
    out: dict[str, Any] = {"throttled_pct": None, "by_reason_pct": {}, "counters_pct": {}}
    dur = energy.held_durations(t, start, stop, hold_ms)
    if dur.sum() > 0:
        m = masks.astype(np.int64)
        out["throttled_pct"] = _r(100 * dur[(m & THROTTLE_MASK) != 0].sum() / dur.sum(), 2)
        out["by_reason_pct"] = {
            name: _r(100 * dur[(m & bit) != 0].sum() / dur.sum(), 2) for bit, name in REASONS.items()
        }
        out["sampled_ms"] = _r(dur.sum(), 0)
    for col, name in COUNTERS.items():
        tc, c = _col(rows, col)
        inc, cov = energy.counter_delta(tc, c, start, stop)
        if cov > 0:  # ns held down per ms of window
            out["counters_pct"][name] = _r(100 * inc / (cov * 1e6), 2)
    return out


def _gpu(
    dev: dict[str, Any], rows: dict[str, np.ndarray], start: float, stop: float, events: list[dict[str, Any]],
    hold_ms: float, reasons: list[str], notes: list[str],
) -> dict[str, Any]:
    uuid, window = dev["uuid"], stop - start
    keys = ("uuid", "name", "pci_bus_id", "serial", "index", "power_limit_mw")
    out: dict[str, Any] = {k: dev.get(k) for k in keys}
    out["selected_mig"] = dev.get("selected_mig", [])
    out["samples"], out["overruns"] = _ticks(rows, start, stop)

    tp, p = _col(rows, "power_instant_mw")
    pint_j, pcov = energy.power_integral_j(tp, p, start, stop)
    te, e = _col(rows, "energy_mj")
    ce = energy.counter_energy_j(te, e, start, stop, tp, p) if len(te) else None
    out["energy_counter_j"] = _r(ce.energy_j) if ce and ce.covered_ms > 0 else None
    out["energy_power_integral_j"] = _r(pint_j) if pcov > 0 else None
    out["counter_resets"] = ce.resets if ce else None
    out["reset_gap_j"] = _r(ce.gap_j) if ce and ce.resets else None
    out["reset_gap_source"] = ce.gap_source if ce else None
    if out["energy_counter_j"] is not None:
        out["energy_j"], out["energy_source"], cov = out["energy_counter_j"], "energy counter", ce.covered_ms
    elif out["energy_power_integral_j"] is not None:
        out["energy_j"], out["energy_source"], cov = out["energy_power_integral_j"], "power integral", pcov
        notes.append(f"GPU {uuid}: no energy counter; energy from the instantaneous power integral")
    else:
        out["energy_j"], out["energy_source"], cov = None, None, 0.0
        reasons.append(f"GPU {uuid}: neither the energy counter nor instantaneous power is available")
    out["coverage_pct"] = _r(100 * cov / window, 2) if window > 0 else None
    a, b = out["energy_counter_j"], out["energy_power_integral_j"]
    out["disagreement_pct"] = _r(100 * (a - b) / b, 2) if a is not None and b else None

    src = "power_instant_mw" if len(tp) else "power_average_mw"
    tps, ps = (tp, p) if len(tp) else _col(rows, "power_average_mw")
    clipped_t, clipped_p = energy.clip(tps, ps, start, stop)
    span = clipped_t[-1] - clipped_t[0] if len(clipped_t) > 1 else 0
    inwin = ps[_in_window(tps, start, stop)]
    out["power_source"] = src if len(ps) else None
    out["mean_power_w"] = _r(energy.trapezoid(clipped_t, clipped_p) / span / 1e3) if span else None
    out["peak_power_w"] = _r(inwin.max() / 1e3) if len(inwin) else None
    tu, u = _col(rows, "util_gpu_pct")
    uw = u[_in_window(tu, start, stop)]
    out["mean_util_pct"] = _r(uw.mean(), 2) if len(uw) else None
    tm, mem = _col(rows, "mem_used_bytes")
    mw = mem[_in_window(tm, start, stop)]
    out["peak_mem_used_mb"] = _r(mw.max() / 2**20, 1) if len(mw) else None
    tt, temp = _col(rows, "temperature_c")
    tw = temp[_in_window(tt, start, stop)]
    out["peak_temperature_c"] = _r(tw.max(), 1) if len(tw) else None
    out["throttle"] = _throttle(rows, start, stop, hold_ms)
    tx, dbe = _col(rows, "ecc_dbe_volatile")
    out["ecc_dbe_increase"] = _r(energy.counter_delta(tx, dbe, start, stop)[0], 0) if len(tx) else None
    tx, sbe = _col(rows, "ecc_sbe_volatile")
    out["ecc_sbe_increase"] = _r(energy.counter_delta(tx, sbe, start, stop)[0], 0) if len(tx) else None
    out["unsupported_fields"] = sorted(
        k for k, v in rows.items() if k not in ("time_ms", "tick") and len(v) and np.isnan(v).all()
        and not k.startswith(("host_", "proc_"))
    )
    out["xid_errors"] = [
        {"time_ms": ev["time_ms"], "xid": ev.get("xid")}
        for ev in events
        if ev.get("kind") == "xid" and ev.get("device") == uuid and start <= ev["time_ms"] <= stop
    ]
    if out["xid_errors"]:
        reasons.append(f"GPU {uuid}: {len(out['xid_errors'])} XID error(s) during the run")
    lost = [ev for ev in events if ev.get("kind") == "gpu_lost" and ev.get("device") == uuid]
    out["lost"] = {"time_ms": lost[0]["time_ms"], "detail": lost[0].get("detail")} if lost else None
    if lost and lost[0]["time_ms"] <= stop:
        reasons.append(f"GPU {uuid} lost at {lost[0]['time_ms']} ms: {lost[0].get('detail')}")
    elif out["coverage_pct"] is not None and out["coverage_pct"] < 100 * MIN_COVERAGE:
        reasons.append(f"GPU {uuid}: samples cover only {out['coverage_pct']}% of the run window")
    return out


def _host(rows: dict[str, np.ndarray], start: float, stop: float, reasons: list[str]) -> dict[str, Any]:
    def stat(col: str, fn: str, scale: float = 1.0) -> float | None:
        t, v = _col(rows, col)
        w = v[_in_window(t, start, stop)]
        return _r(getattr(w, fn)() / scale, 2) if len(w) else None

    out: dict[str, Any] = {}
    out["samples"], out["overruns"] = _ticks(rows, start, stop)
    out["mean_cpu_pct"] = stat("host_cpu_pct", "mean")
    out["peak_cpu_pct"] = stat("host_cpu_pct", "max")
    out["peak_mem_used_mb"] = stat("host_mem_used_bytes", "max", 2**20)
    out["mean_proc_cpu_pct"] = stat("proc_cpu_pct", "mean")  # % of one core, the watched process tree
    out["peak_proc_cpu_pct"] = stat("proc_cpu_pct", "max")
    out["peak_rss_mb"] = stat("proc_rss_bytes", "max", 2**20)
    t = rows["time_ms"]
    if not len(t) or t[0] > start + 1000 or t[-1] < stop - 1000:
        reasons.append("host samples do not cover the run window")
    return out


def _summarize(out_dir: Path, start: int, stop: int) -> dict[str, Any]:
    reasons: list[str] = []
    notes: list[str] = []
    summary: dict[str, Any] = {
        "label": LABEL,
        "window": {"run_start_ms": start, "run_stop_ms": stop, "duration_s": round((stop - start) / 1e3, 3)},
    }
    side = read_sidecar(out_dir)
    if side is None:
        summary.update(partial=True, reasons=["no telemetry sidecar: the sampler never started"], nvml=None)
        return summary
    status = side.get("status")
    if status == "failed":
        reasons += side.get("reasons", [])
    elif status != "complete":
        reasons.append(f"sampler did not finish (status {status!r}: killed or still running)")
        reasons += side.get("reasons", [])
    else:
        reasons += [r for r in side.get("reasons", []) if " lost: " not in r]  # lost GPUs: judged per window
    notes += side.get("notes", [])
    nvml = side.get("nvml", {})
    summary["nvml"] = nvml.get("reason") or "ok"
    summary["system"] = {k: nvml.get(k) for k in ("driver_version", "cuda_driver_version", "library_version")}
    summary["config"] = side.get("config", {})
    summary["sampler"] = {k: side.get(k) for k in ("status", "ticks", "overruns", "rows", "read_errors", "stop_reason")}

    table, complete = read_samples(out_dir)
    if not complete and status == "complete":
        reasons.append(f"{SAMPLES} is missing although the sampler finished")
    events = read_events(out_dir)
    hold_ms = 1000.0 * float(summary["config"].get("slow_every_s", 1.0)) * 1.5
    devices = table.devices()
    summary["gpus"] = []
    for dev in side.get("devices", []):
        if dev["uuid"] in devices:
            rows = _arrays(table, dev["uuid"])
            summary["gpus"].append(_gpu(dev, rows, start, stop, events, hold_ms, reasons, notes))
        else:
            reasons.append(f"GPU {dev['uuid']}: no samples")
    if HOST_DEVICE in devices:
        summary["host"] = _host(_arrays(table, HOST_DEVICE), start, stop, reasons)
    else:
        summary["host"] = None
        if summary["config"].get("host_backend", True):
            reasons.append("no host samples")
    gpu_e = [g["energy_j"] for g in summary["gpus"]]
    summary["accelerator_energy_j"] = _r(sum(gpu_e)) if gpu_e and None not in gpu_e else None
    summary["partial"] = bool(reasons)
    summary["reasons"] = list(dict.fromkeys(reasons))
    summary["notes"] = list(dict.fromkeys(notes))
    return summary


def _node_summaries(out_dir: Path, start: int, stop: int) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The record of the run's other nodes (None on one node) and each one's own summary (written into its folder;
    None where its sampler wrote nothing)."""
    try:
        nodes = json.loads((out_dir / NODES).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, {}
    except (OSError, ValueError) as e:
        return {"hosts": [], "error": f"{NODES} is unreadable: {e}"}, {}
    own: dict[str, Any] = {}
    for name in nodes.get("hosts", []):
        try:
            folder = out_dir / NODES_DIR / host_folder(name)
        except ValueError:
            own[name] = None  # not a folder name: reported as a node whose sampler wrote nothing
            continue
        own[name] = _one(folder, start, stop) if folder.is_dir() else None
    return nodes, own


def _one(out_dir: Path, start: Any, stop: Any) -> dict[str, Any]:
    """One host's summary; a failure becomes a partial summary that says why."""
    try:
        summary = _summarize(out_dir, int(start), int(stop))
    except Exception as e:
        summary = {
            "label": LABEL,
            "window": {"run_start_ms": start, "run_stop_ms": stop},
            "partial": True,
            "reasons": [f"summary failed: {type(e).__name__}: {e}"],
            "traceback": traceback.format_exc(limit=6),
        }
    return summary


def summarize(out_dir: Path, run_start_ms: int, run_stop_ms: int) -> dict[str, Any]:
    """Summary of ``out_dir``'s telemetry over the run window; also written to out_dir/summary.json.
    A run over several nodes: each other node's summary too (NODES_DIR/<host>/summary.json), merged into this
    one with its per-host section and the total (:mod:`mlrepro.telemetry.merge`).
    Never raises: a failure becomes a partial summary that says why."""
    out_dir = Path(out_dir)
    summary = _one(out_dir, run_start_ms, run_stop_ms)
    try:
        nodes, own = _node_summaries(out_dir, int(run_start_ms), int(run_stop_ms))
        for name, node in own.items():
            if node is not None:
                _write(out_dir / NODES_DIR / name, node)
        host = ((read_sidecar(out_dir) or {}).get("host") or {}).get("hostname") or socket.gethostname()
        summary = merge(summary, host, nodes, own)
    except Exception as e:
        summary.setdefault("reasons", []).append(f"the nodes' telemetry could not be merged: {type(e).__name__}: {e}")
        summary["partial"] = True
    _write(out_dir, summary)
    return summary


def _write(out_dir: Path, summary: dict[str, Any]) -> None:
    try:
        atomic.write_json(out_dir / SUMMARY, summary)
    except Exception as e:
        summary.setdefault("reasons", []).append(f"could not write {SUMMARY}: {e}")
