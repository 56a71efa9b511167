"""How much CPU the telemetry sampler costs: ``python benchmarks/telemetry_overhead.py [--seconds 20]``.

1. Starts the real sampler process (host backend; GPUs too with ``--backend nvml``) at ``--hz``,
   watching this process, and reads the sampler's own CPU time from /proc (psutil) once it is up and
   again ``--seconds`` later: steady-state CPU as % of one core, startup (imports) reported apart.
2. Times one sample in-process (host read + row into the store), median of many, fast and slow
   ticks apart, and one chunk flush (5 s of rows to Parquet).
Target: under 1% of one core at 10 Hz.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from mlrepro.telemetry import start_sampler
from mlrepro.telemetry.host import HostSampler
from mlrepro.telemetry.loop import RealClock, SamplerLoop
from mlrepro.telemetry.store import EventLog, SampleStore, read_sidecar


def sampler_cpu(seconds: float, hz: float, backend: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        # a child to watch, so the process-tree reads have a tree to walk
        child = psutil.Popen(["sleep", str(seconds + 30)])
        try:
            t_start = time.monotonic()
            handle = start_sampler(Path(d), hz=hz, watch_pid=psutil.Process().pid, backend=backend)
            if handle.status != "running" or handle.proc is None:
                raise SystemExit(f"sampler did not start: {handle.status}")
            startup_wall = time.monotonic() - t_start
            proc = psutil.Process(handle.proc.pid)
            c0, w0 = proc.cpu_times(), time.monotonic()
            time.sleep(seconds)
            c1, w1 = proc.cpu_times(), time.monotonic()
            handle.stop()
            side = read_sidecar(Path(d)) or {}
        finally:
            child.kill()
            child.wait()
    busy = (c1.user + c1.system) - (c0.user + c0.system)
    return {
        "cpu_pct_of_one_core": 100 * busy / (w1 - w0),
        "cpu_s": busy,
        "wall_s": w1 - w0,
        "startup_cpu_s": c0.user + c0.system,
        "startup_wall_s": startup_wall,
        "ticks": float(side.get("ticks") or 0),
        "overruns": float(side.get("overruns") or 0),
    }


def per_sample_cost(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        store = SampleStore(Path(d), flush_every_s=1e9)  # flushes timed on their own below
        events = EventLog(Path(d))
        loop = SamplerLoop(store, events, RealClock(), 10.0, host=HostSampler(psutil.Process().pid))
        out: dict[str, float] = {}
        for slow in (False, True):
            cpu, wall = [], []
            for k in range(n):
                c, w = time.thread_time_ns(), time.perf_counter_ns()
                loop._sample(k, slow)
                cpu.append(time.thread_time_ns() - c)
                wall.append(time.perf_counter_ns() - w)
            tag = "slow" if slow else "fast"
            out[f"{tag}_tick_cpu_us_median"] = statistics.median(cpu) / 1e3
            out[f"{tag}_tick_wall_us_median"] = statistics.median(wall) / 1e3
        flushes = []
        for _ in range(10):
            store.rows = store.rows[:0]
            for k in range(50):
                loop._sample(k, k % 10 == 0)
            c = time.thread_time_ns()
            store.flush()
            flushes.append(time.thread_time_ns() - c)
        out["flush_50_rows_cpu_ms_median"] = statistics.median(flushes) / 1e6
        events.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--hz", type=float, default=10.0)
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--backend", default="none", help="none (host only) or nvml")
    args = p.parse_args()
    cost = per_sample_cost(args.samples)
    print(f"per-sample cost (median of {args.samples}, one thread's CPU time):")
    for k, v in cost.items():
        print(f"  {k:32s} {v:9.1f}")
    res = sampler_cpu(args.seconds, args.hz, args.backend)
    print(f"sampler process at {args.hz:g} Hz, backend {args.backend!r} + host, {res['wall_s']:.1f} s:")
    print(f"  CPU: {res['cpu_pct_of_one_core']:.3f}% of one core ({res['cpu_s']:.3f} s CPU)  [target < 1%]")
    print(f"  startup: {res['startup_cpu_s']:.2f} s CPU, {res['startup_wall_s']:.2f} s until ready")
    print(f"  ticks {res['ticks']:.0f}, overruns {res['overruns']:.0f}")
    print(f"  machine load average: {', '.join(f'{x:.2f}' for x in psutil.getloadavg())} "
          f"on {psutil.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
