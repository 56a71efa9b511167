"""A GPU backend that replays a recorded trace: tests and demos without a GPU.

A trace is plain JSON::

    {"system": {"driver_version": ..., "cuda_driver_version": ...},
     "unavailable": null,                  # or a reason: open() then fails as NVML would
     "devices": [{"index": 0, "uuid": "GPU-...", "name": ..., "pci_bus_id": ..., "power_limit_mw": ...,
                  "mig_uuids": [...], "lost_at_ms": null,
                  "samples": [{"t_ms": 0, "power_instant_mw": ..., "energy_mj": ..., ...}, ...]}],
     "xid": [{"t_ms": ..., "uuid": ..., "xid": 79}]}

A cluster's trace is ``{"hosts": {HOST NAME: TRACE, ...}}``: each node replays its own, as each node's
NVML sees its own GPUs; a node without one fails as a broken sampler would.

``t_ms`` counts from :meth:`open`. A read returns the latest recorded sample at or before now, as a
real counter holds its value between updates; a field absent from a sample or null is unsupported.
"""

from __future__ import annotations

import bisect
import json
import socket
import time
from pathlib import Path
from typing import Any

from mlrepro.telemetry.backend import (
    FAST_FIELDS,
    SLOW_FIELDS,
    BackendUnavailable,
    DeviceInfo,
    DeviceLost,
    SystemInfo,
    Value,
    XidEvent,
    XidRegistration,
)
from mlrepro.telemetry.loop import Clock


class ReplayBackend:
    name = "replay"

    def __init__(self, trace: dict[str, Any], clock: Clock) -> None:
        if "hosts" in trace:
            name = socket.gethostname()
            if name not in trace["hosts"]:
                raise ValueError(f"the replayed trace has no host {name!r} (it has {sorted(trace['hosts'])})")
            trace = trace["hosts"][name]
        self.trace, self.clock = trace, clock
        self._t0 = 0.0
        self._devices = {d["uuid"]: d for d in trace.get("devices", [])}
        self._times = {u: [s["t_ms"] for s in d.get("samples", [])] for u, d in self._devices.items()}
        self._xid = sorted(trace.get("xid", []), key=lambda e: e["t_ms"])
        self._wall0_ms = 0

    @classmethod
    def from_file(cls, path: Path, clock: Clock) -> ReplayBackend:
        return cls(json.loads(path.read_text(encoding="utf-8")), clock)

    def _now_ms(self) -> float:
        return (self.clock.monotonic() - self._t0) * 1000.0

    def open(self) -> SystemInfo:
        if self.trace.get("unavailable"):
            raise BackendUnavailable(self.trace["unavailable"])
        self._t0 = self.clock.monotonic()
        self._wall0_ms = self.clock.time_ms()
        s = self.trace.get("system", {})
        return SystemInfo(self.name, s.get("driver_version"), s.get("cuda_driver_version"), "replay")

    def devices(self) -> list[DeviceInfo]:
        return [
            DeviceInfo(
                index=d.get("index", i),
                uuid=d["uuid"],
                name=d.get("name", "replayed GPU"),
                pci_bus_id=d.get("pci_bus_id"),
                serial=d.get("serial"),
                power_limit_mw=d.get("power_limit_mw"),
                mig_uuids=tuple(d.get("mig_uuids", ())),
            )
            for i, d in enumerate(self._devices.values())
        ]

    def _read(self, uuid: str, fields: tuple[str, ...]) -> dict[str, Value]:
        dev, now = self._devices[uuid], self._now_ms()
        lost = dev.get("lost_at_ms")
        if lost is not None and now >= lost:
            raise DeviceLost(f"{uuid}: GPU is lost (replayed at {lost} ms)")
        i = bisect.bisect_right(self._times[uuid], now) - 1
        sample = dev["samples"][i] if i >= 0 else {}
        return {f: sample.get(f) for f in fields}

    def read_fast(self, uuid: str) -> dict[str, Value]:
        return self._read(uuid, FAST_FIELDS)

    def read_slow(self, uuid: str) -> dict[str, Value]:
        return self._read(uuid, SLOW_FIELDS)

    def register_xid(self, uuids: list[str]) -> XidRegistration:
        return XidRegistration(True, None, list(uuids))

    def wait_xid(self, timeout_ms: int) -> list[XidEvent]:
        due = [e for e in self._xid if e["t_ms"] <= self._now_ms()]
        if not due:
            time.sleep(min(timeout_ms, 10) / 1000)  # real time: the loop's clock may be virtual
            return []
        self._xid = self._xid[len(due) :]
        return [XidEvent(e.get("uuid"), int(e["xid"]), self._wall0_ms + int(e["t_ms"])) for e in due]

    def close(self) -> None:
        pass
