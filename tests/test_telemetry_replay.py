"""The sampling loop, storage and summary against recorded-trace replays (no GPU, virtual clock)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlrepro.telemetry import summarize
from mlrepro.telemetry.backend import DeviceInfo
from mlrepro.telemetry.loop import SamplerLoop, XidWatcher
from mlrepro.telemetry.replay import ReplayBackend
from mlrepro.telemetry.series import series
from mlrepro.telemetry.store import EventLog, SampleStore, read_samples, write_sidecar
from mlrepro.telemetry.visible import select

WALL0 = 1_700_000_000_000
GPU_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
GPU_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"


class VirtualClock:
    """Time moves only when the loop sleeps (or a test backend says a read was slow)."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def time_ms(self) -> int:
        return WALL0 + round(self.t * 1000)

    def sleep_until(self, deadline: float, stop: threading.Event) -> bool:
        self.t = max(self.t, deadline)
        return stop.is_set()


def power_w(t_ms: float) -> float:
    return 200.0 if t_ms < 15_000 else 400.0


def true_energy_j(a_ms: float, b_ms: float) -> float:
    """Exact integral of power_w over [a, b] (ms since the trace start)."""
    low = max(0.0, min(b_ms, 15_000) - min(a_ms, 15_000))
    high = max(0.0, max(b_ms, 15_000) - max(a_ms, 15_000))
    return (200.0 * low + 400.0 * high) / 1e3


def gpu_trace(
    uuid: str, seconds: float = 30.0, reset_at_ms: float | None = None, unsupported: tuple[str, ...] = (),
    lost_at_ms: float | None = None, mig_uuids: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A recorded GPU: its counter steps every 100 ms (out of phase with the sampler, as on real GPUs)."""
    samples, energy_mj, last_t, throttle_ns = [], 0.0, 0.0, 0
    for t in np.arange(50.0, seconds * 1000 + 1, 100.0):
        energy_mj += power_w(t - 50) * (t - last_t)  # W * ms = mJ
        if reset_at_ms is not None and last_t < reset_at_ms <= t:
            energy_mj = power_w(t - 50) * (t - reset_at_ms)  # the driver reloaded: counting from zero
        if 10_000 <= t < 15_000:
            throttle_ns += 100 * 1_000_000
        last_t = t
        reasons = 0x1 if t < 10_000 else (0x4 if t < 15_000 else 0)
        s = {
            "t_ms": float(t), "power_instant_mw": power_w(t) * 1e3, "power_average_mw": power_w(t) * 1e3,
            "energy_mj": int(energy_mj), "util_gpu_pct": 90.0, "util_mem_pct": 40.0, "sm_clock_mhz": 1800,
            "throttle_power_ns": throttle_ns, "mem_used_bytes": 2**30, "mem_total_bytes": 2**34,
            "temperature_c": 60, "clock_event_reasons": reasons, "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0,
            "mem_clock_mhz": 2600,
        }
        for f in unsupported:
            s[f] = None  # recorded as NOT_SUPPORTED
        samples.append(s)
    return {"uuid": uuid, "name": "Replayed H100", "pci_bus_id": "00000000:17:00.0",
            "power_limit_mw": 700_000, "samples": samples, "lost_at_ms": lost_at_ms, "mig_uuids": list(mig_uuids)}


def run_replay(out_dir: Path, trace: dict[str, Any], seconds: float, slow_read_at: float | None = None,
               host: bool = False) -> tuple[SamplerLoop, VirtualClock]:
    clock = VirtualClock()
    backend = ReplayBackend(trace, clock)
    system = backend.open()
    devices = backend.devices()
    uuids = [d.uuid for d in devices]
    if slow_read_at is not None:  # one read that takes 350 ms: the loop must skip deadlines, not burst
        fast = backend.read_fast

        def slow_read(uuid: str) -> dict[str, Any]:
            if slow_read_at <= clock.t < slow_read_at + 0.05 and uuid == uuids[0]:
                clock.t += 0.35
            return fast(uuid)

        backend.read_fast = slow_read  # type: ignore[method-assign]
    store, events = SampleStore(out_dir, flush_every_s=1e9), EventLog(out_dir)
    xid = XidWatcher(backend, events, clock, poll_ms=5)
    xid.start()
    host_sampler = None
    if host:
        from mlrepro.telemetry.host import HostSampler

        host_sampler = HostSampler(None)
    loop = SamplerLoop(store, events, clock, 10.0, host=host_sampler, gpu=backend, uuids=uuids,
                       check=lambda: "done" if clock.t >= seconds else None, check_every_s=0.0)
    stats = loop.run(threading.Event())
    xid.finish()
    rows = store.finalize()
    events.close()
    write_sidecar(out_dir, {
        "status": "complete", "reasons": [], "notes": [],
        "config": {"hz": 10.0, "slow_every_s": 1.0, "host_backend": host},
        "nvml": {"available": True, "reason": None, "driver_version": system.driver_version},
        "devices": [{**d.__dict__, "mig_uuids": list(d.mig_uuids)} for d in devices],
        "ticks": stats.ticks, "overruns": stats.overruns, "rows": rows,
    })
    return loop, clock


def gpu_summary(summary: dict[str, Any], uuid: str) -> dict[str, Any]:
    return next(g for g in summary["gpus"] if g["uuid"] == uuid)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SamplerLoop]:
    """30 s of two GPUs: A with a counter reset at 12.34 s, B with no energy counter nor utilisation."""
    out = tmp_path_factory.mktemp("replay")
    trace = {
        "system": {"driver_version": "550.54.15", "cuda_driver_version": "12.4"},
        "devices": [gpu_trace(GPU_A, reset_at_ms=12_340),
                    gpu_trace(GPU_B, unsupported=("energy_mj", "util_gpu_pct", "util_mem_pct"))],
        "xid": [{"t_ms": 8_000, "uuid": GPU_A, "xid": 79}, {"t_ms": 29_000, "uuid": GPU_A, "xid": 48}],
    }
    loop, _ = run_replay(out, trace, 30.0, slow_read_at=20.0)
    return out, loop


WINDOW = (WALL0 + 5_000, WALL0 + 25_000)


def test_one_row_per_gpu_per_tick_with_slow_fields_once_a_second(replayed: tuple[Path, SamplerLoop]) -> None:
    out, loop = replayed
    table, complete = read_samples(out)
    a = table.of(GPU_A)
    assert complete and loop.stats.ticks == a.num_rows == table.num_rows // 2
    assert 290 <= a.num_rows <= 301
    temps = a.column("temperature_c")
    assert 28 <= sum(v is not None for v in temps) <= 32  # 1 Hz of a 10 Hz loop
    assert all(v is not None for v in a.column("power_instant_mw")[1:])  # recording starts at 50 ms


def test_unsupported_fields_are_null_not_zero(replayed: tuple[Path, SamplerLoop]) -> None:
    out, _ = replayed
    b = read_samples(out)[0].of(GPU_B)
    assert b.column("energy_mj").count(None) == b.num_rows
    assert b.column("util_gpu_pct").count(None) == b.num_rows
    g = gpu_summary(summarize(out, *WINDOW), GPU_B)
    assert g["energy_counter_j"] is None and g["mean_util_pct"] is None
    assert g["energy_source"] == "power integral"
    assert {"energy_mj", "util_gpu_pct"} <= set(g["unsupported_fields"])
    assert g["energy_j"] == pytest.approx(true_energy_j(5_000, 25_000), rel=0.01)


def test_counter_energy_split_at_reset_matches_truth(replayed: tuple[Path, SamplerLoop]) -> None:
    out, _ = replayed
    s = summarize(out, *WINDOW)
    g = gpu_summary(s, GPU_A)
    truth = true_energy_j(5_000, 25_000)  # 200 W x 10 s + 400 W x 10 s = 6000 J
    assert truth == pytest.approx(6000.0)
    assert g["counter_resets"] == 1
    assert g["energy_source"] == "energy counter"
    assert g["energy_counter_j"] == pytest.approx(truth, rel=0.01)
    assert g["energy_power_integral_j"] == pytest.approx(truth, rel=0.01)
    assert abs(g["disagreement_pct"]) < 1.0
    # the naive delta across the reset is far off: the split is what makes the figure right
    a = read_samples(out)[0].of(GPU_A)
    inwin = [e for t, e in zip(a.column("time_ms"), a.column("energy_mj"), strict=True) if WINDOW[0] <= t <= WINDOW[1]]
    assert abs((inwin[-1] - inwin[0]) / 1e3 - truth) > 0.3 * truth
    assert g["mean_power_w"] == pytest.approx(300.0, rel=0.01)
    assert g["peak_power_w"] == pytest.approx(400.0)
    assert g["mean_util_pct"] == pytest.approx(90.0)
    assert s["label"].startswith("accelerator energy (NVML)")
    assert s["accelerator_energy_j"] == pytest.approx(2 * truth, rel=0.01)


def test_window_edges_are_interpolated_not_rounded_to_ticks(replayed: tuple[Path, SamplerLoop]) -> None:
    out, _ = replayed
    start, stop = WALL0 + 16_037, WALL0 + 17_012  # mid-tick edges, constant 400 W
    g = gpu_summary(summarize(out, start, stop), GPU_A)
    assert g["energy_counter_j"] == pytest.approx(400.0 * 0.975, rel=0.01)
    assert g["energy_power_integral_j"] == pytest.approx(400.0 * 0.975, rel=0.001)


def test_throttle_time_by_reason_idle_is_not_throttling(replayed: tuple[Path, SamplerLoop]) -> None:
    out, _ = replayed
    th = gpu_summary(summarize(out, *WINDOW), GPU_A)["throttle"]
    # [5, 25] s: idle 5-10 s (not throttling), power cap 10-15 s, nothing after
    assert th["throttled_pct"] == pytest.approx(25.0, abs=5.5)
    assert th["by_reason_pct"]["sw_power_cap"] == pytest.approx(25.0, abs=5.5)
    assert th["by_reason_pct"]["gpu_idle"] == pytest.approx(25.0, abs=5.5)
    assert th["counters_pct"]["sw_power_cap"] == pytest.approx(25.0, abs=1.0)


def test_overruns_are_skipped_and_counted(replayed: tuple[Path, SamplerLoop]) -> None:
    out, loop = replayed
    assert loop.stats.overruns == 2  # a 350 ms read at a 100 ms period misses two deadlines
    ticks = read_samples(out)[0].of(GPU_A).column("tick")
    assert len(ticks) == len(set(ticks)) and max(ticks) - min(ticks) + 1 - len(ticks) == 2
    g = gpu_summary(summarize(out, *WINDOW), GPU_A)
    assert g["overruns"] == 2
    assert gpu_summary(summarize(out, WALL0 + 1000, WALL0 + 5000), GPU_A)["overruns"] == 0


def test_xid_errors_in_the_window_are_reported(replayed: tuple[Path, SamplerLoop]) -> None:
    out, _ = replayed
    s = summarize(out, *WINDOW)
    assert [e["xid"] for e in gpu_summary(s, GPU_A)["xid_errors"]] == [79]  # the one at 29 s is after the run
    assert s["partial"] and any("XID" in r for r in s["reasons"])
    assert json.loads((out / "summary.json").read_text())["gpus"][0]["xid_errors"][0]["xid"] == 79


def test_series(replayed: tuple[Path, SamplerLoop]) -> None:
    out, _ = replayed
    ser = series(out, *WINDOW)
    a = ser["gpus"][GPU_A]
    assert len(a["time_ms"]) == len(a["power_w"]) > 150
    assert a["power_w"][0] == pytest.approx(200.0) and a["power_w"][-1] == pytest.approx(400.0)
    assert all(v is None for v in ser["gpus"][GPU_B]["util_pct"])


def test_gpu_lost_mid_run_marks_partial_and_keeps_the_rest(tmp_path: Path) -> None:
    trace = {"devices": [gpu_trace(GPU_A, seconds=12, lost_at_ms=6_000), gpu_trace(GPU_B, seconds=12)]}
    loop, _ = run_replay(tmp_path, trace, 12.0, host=True)
    assert list(loop.stats.lost) == [GPU_A]
    s = summarize(tmp_path, WALL0 + 1_000, WALL0 + 11_000)
    a, b = gpu_summary(s, GPU_A), gpu_summary(s, GPU_B)
    assert s["partial"] and any(GPU_A in r and "lost" in r for r in s["reasons"])
    assert a["lost"] is not None and a["coverage_pct"] < 60
    assert b["lost"] is None and b["coverage_pct"] == pytest.approx(100.0)
    assert b["energy_j"] == pytest.approx(2000.0, rel=0.01)
    assert s["host"]["samples"] >= 95  # the host went on after the GPU was gone
    # before the loss the run is whole: no reason to call that window partial
    early = summarize(tmp_path, WALL0 + 1_000, WALL0 + 5_000)
    assert not any("lost" in r for r in early["reasons"])


def devices_with_mig() -> list[DeviceInfo]:
    return [
        DeviceInfo(0, GPU_A, "H100", mig_uuids=("MIG-1111aaaa-0000-0000-0000-000000000000",)),
        DeviceInfo(1, GPU_B, "H100"),
    ]


@pytest.mark.parametrize(
    ("cvd", "order", "expect"),
    [
        (None, None, [GPU_A, GPU_B]),
        ("1", "PCI_BUS_ID", [GPU_B]),
        ("GPU-bbbbbbbb", None, [GPU_B]),  # a unique UUID prefix, as CUDA allows
        (f"{GPU_B},{GPU_A}", None, [GPU_B, GPU_A]),
        ("MIG-1111aaaa-0000-0000-0000-000000000000", None, [GPU_A]),  # sampled via its parent
        (f"MIG-{GPU_B}/1/0", None, [GPU_B]),  # the legacy MIG-GPU-<uuid>/gi/ci form
        ("0,7,1", "PCI_BUS_ID", [GPU_A]),  # CUDA ignores what follows an invalid entry
        ("", None, []),
        ("GPU-", None, []),  # ambiguous
    ],
)
def test_cuda_visible_devices(cvd: str | None, order: str | None, expect: list[str]) -> None:
    assert select(cvd, devices_with_mig(), order).uuids == expect


def test_cuda_visible_devices_notes() -> None:
    sel = select("MIG-1111aaaa", devices_with_mig())
    assert sel.mig == {GPU_A: ["MIG-1111aaaa"]} and any("parent GPU" in n for n in sel.notes)
    assert any("PCI bus order" in n for n in select("1,0", devices_with_mig()).notes)
