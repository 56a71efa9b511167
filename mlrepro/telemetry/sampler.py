"""The sampler process: ``python -m mlrepro.telemetry.sampler --out-dir DIR [--hz 10] [--watch-pid PID]``.

It never imports torch and never creates a CUDA context. It prints one JSON line on stdout once it
is sampling (or once it knows why it cannot), then samples until SIGTERM/SIGINT/SIGUSR1, until the
watched process or its own parent exits. SIGUSR1 is for a sampler started as an ``srun`` task on
another node (:mod:`mlrepro.telemetry.nodes`): srun forwards it to its tasks, while SIGTERM makes srun
kill them. ``--host-dir`` writes into OUT_DIR/<host name>, a folder per node. Whatever goes wrong
is written into the sidecar, never raised at the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import psutil

from mlrepro.telemetry.backend import BackendUnavailable, GpuBackend
from mlrepro.telemetry.host import HostSampler
from mlrepro.telemetry.loop import RealClock, SamplerLoop, XidWatcher
from mlrepro.telemetry.store import EventLog, SampleStore, host_folder, write_sidecar
from mlrepro.telemetry.visible import select
from mlrepro.telemetry.watch import Watched

SCHEMA_VERSION = 1


def _announce(status: dict[str, Any]) -> None:
    """Tell the launcher we are up (one line), then let go of the pipe."""
    try:
        sys.stdout.write(json.dumps(status) + "\n")
        sys.stdout.flush()
        sys.stdout.close()
    except OSError:
        pass


def make_backend(spec: str, clock: RealClock) -> GpuBackend | None:
    if spec == "none":
        return None
    if spec.startswith("replay:"):
        from mlrepro.telemetry.replay import ReplayBackend

        return ReplayBackend.from_file(Path(spec[len("replay:") :]), clock)
    from mlrepro.telemetry.nvml import NvmlBackend

    return NvmlBackend()


def run(args: argparse.Namespace) -> int:
    out_dir: Path = args.out_dir
    if args.host_dir:
        out_dir = out_dir / host_folder(socket.gethostname())
    out_dir.mkdir(parents=True, exist_ok=True)
    clock = RealClock()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, lambda *_: stop.set())

    sidecar: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "status": "starting",
        "partial": True,
        "reasons": [],
        "notes": [],
        "label": "accelerator telemetry (NVML) and host telemetry (psutil); not an MLPerf power measurement",
        "config": {
            "hz": args.hz,
            "slow_every_s": args.slow_every_s,
            "flush_every_s": args.flush_every_s,
            "watch_pid": args.watch_pid,
            "parent_pid": args.parent_pid,
            "backend": args.backend,
            "host_backend": not args.no_host,
            "fast_fields_every_tick": True,
            "units": {"power": "mW", "energy": "mJ", "throttle_*": "ns", "time_ms": "ms since epoch"},
        },
        "host": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "cpu_count": psutil.cpu_count(),
            "mem_total_bytes": psutil.virtual_memory().total,
        },
        "nvml": {"available": False, "reason": None},
        "devices": [],
        "sampler_pid": os.getpid(),
    }
    store = events = xid = gpu = None
    announced = False
    try:
        watched = Watched(args.watch_pid) if args.watch_pid else None
        host = None if args.no_host else HostSampler(args.watch_pid)
        gpu = make_backend(args.backend, clock)
        uuids: list[str] = []
        if gpu is None:
            sidecar["nvml"]["reason"] = "no NVML: GPU sampling disabled (--backend none)"
        else:
            try:
                system = gpu.open()
                devices = gpu.devices()
                cvd, cvd_source = (
                    watched.cuda_visible_devices()
                    if watched
                    else (os.environ.get("CUDA_VISIBLE_DEVICES"), "sampler's own environment")
                )
                sel = select(cvd, devices, os.environ.get("CUDA_DEVICE_ORDER"))
                uuids = sel.uuids
                sidecar["nvml"] = {
                    "available": bool(uuids),
                    "reason": None if uuids else f"no NVML: no visible GPU (CUDA_VISIBLE_DEVICES={cvd!r})",
                    "backend": system.backend,
                    "driver_version": system.driver_version,
                    "cuda_driver_version": system.cuda_driver_version,
                    "library_version": system.library_version,
                    "cuda_visible_devices": cvd,
                    "cuda_visible_devices_source": cvd_source,
                    "skipped": getattr(gpu, "skipped", []),
                }
                sidecar["notes"] += sel.notes
                sidecar["devices"] = [
                    {**d.__dict__, "mig_uuids": list(d.mig_uuids), "selected_mig": sel.mig.get(d.uuid, [])}
                    for d in devices
                    if d.uuid in uuids
                ]
            except BackendUnavailable as e:
                sidecar["nvml"]["reason"] = f"no NVML: {e}"
                gpu = None
        if sidecar["nvml"]["reason"]:
            sidecar["reasons"].append(sidecar["nvml"]["reason"])

        store = SampleStore(out_dir, args.flush_every_s)
        events = EventLog(out_dir)
        if gpu is not None and uuids:
            reg = gpu.register_xid(uuids)
            if reg.ok:
                xid = XidWatcher(gpu, events, clock)
                xid.start()
            if reg.reason:
                sidecar["notes"].append(f"XID events not watched for: {reg.reason}")

        parent = args.parent_pid

        def check() -> str | None:
            if watched is not None and not watched.alive():
                return f"watched pid {watched.pid} exited"
            if parent and os.getppid() != parent:
                return f"parent pid {parent} exited"
            return None

        loop = SamplerLoop(
            store, events, clock, args.hz, host=host, gpu=gpu if uuids else None, uuids=uuids,
            slow_every_s=args.slow_every_s, check=check,
        )
        sidecar.update(status="running", started_ms=clock.time_ms())
        write_sidecar(out_dir, sidecar)

        def first_tick() -> None:
            # the launcher returns only now, so a run started after it is covered from its first ms
            nonlocal announced
            _announce({"status": "running", "nvml": sidecar["nvml"]["reason"] or "ok", "host": socket.gethostname()})
            announced = True

        cpu0 = time.process_time()
        stats = loop.run(stop, on_first_tick=first_tick)
        if xid is not None:
            xid.finish()
        rows = store.finalize()
        sidecar.update(
            status="complete",
            stopped_ms=clock.time_ms(),
            stop_reason=stats.stop_reason,
            ticks=stats.ticks,
            overruns=stats.overruns,
            rows=rows,
            read_errors=stats.errors,
            xid_events=xid.count if xid is not None else None,
            lost_gpus=stats.lost,
            sampler_cpu_s=round(time.process_time() - cpu0, 4),
        )
        sidecar["reasons"] += [f"GPU {u} lost: {r}" for u, r in stats.lost.items()]
        sidecar["partial"] = bool(sidecar["reasons"])
        write_sidecar(out_dir, sidecar)
        return 0
    except BaseException as e:  # anything at all: record it; the run must go on
        reason = f"sampler failed: {type(e).__name__}: {e}"
        sidecar.update(status="failed", partial=True, failed_ms=clock.time_ms())
        sidecar["reasons"].append(reason)
        sidecar["traceback"] = traceback.format_exc(limit=8)
        try:
            if store is not None:
                store.flush()  # keep what was sampled, as a (partial) chunk
        except Exception:
            pass
        with contextlib.suppress(Exception):
            write_sidecar(out_dir, sidecar)
        if not announced:
            _announce({"status": "failed", "reason": reason, "host": socket.gethostname()})
        print(sidecar["traceback"], file=sys.stderr)
        return 1
    finally:
        if events is not None:
            events.close()
        if gpu is not None:
            with contextlib.suppress(Exception):
                gpu.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlrepro.telemetry.sampler", description=__doc__)
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--hz", type=float, default=10.0)
    p.add_argument("--slow-every-s", type=float, default=1.0)
    p.add_argument("--flush-every-s", type=float, default=5.0)
    p.add_argument("--watch-pid", type=int, default=None)
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this parent goes away")
    p.add_argument("--backend", default="nvml", help="nvml | none | replay:TRACE.json")
    p.add_argument("--no-host", action="store_true", help="no psutil host sampling")
    p.add_argument("--host-dir", action="store_true", help="write into OUT_DIR/<this host's name>")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
