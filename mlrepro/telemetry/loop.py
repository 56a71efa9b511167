"""The deadline-scheduled sampling loop and the XID watcher thread, independent of any real clock or GPU.

Deadlines are ``t0 + k * period`` on a monotonic clock, so the rate does not drift with the time a
tick takes; when a tick runs so late that later deadlines have passed too, those are skipped (not
caught up in a burst) and counted as overruns. Each stored row carries its tick index, so the
summary can count the overruns inside a run window.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from mlrepro.telemetry.backend import DeviceLost, GpuBackend
from mlrepro.telemetry.host import HostSampler
from mlrepro.telemetry.store import HOST_DEVICE, EventLog, SampleStore

_MAX_ERRORS_LOGGED = 20  # per device: a field failing every tick must not flood the event log


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time_ms(self) -> int: ...

    def sleep_until(self, deadline: float, stop: threading.Event) -> bool:
        """Sleep until the monotonic ``deadline``; True when ``stop`` was set meanwhile."""
        ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000  # the clock of mllog's time_ms

    def sleep_until(self, deadline: float, stop: threading.Event) -> bool:
        return stop.wait(max(0.0, deadline - time.monotonic()))


@dataclass
class LoopStats:
    ticks: int = 0
    overruns: int = 0
    stop_reason: str = ""
    lost: dict[str, str] = field(default_factory=dict)  # uuid -> reason
    errors: int = 0


class SamplerLoop:
    def __init__(
        self,
        store: SampleStore,
        events: EventLog,
        clock: Clock,
        hz: float,
        host: HostSampler | None = None,
        gpu: GpuBackend | None = None,
        uuids: list[str] | None = None,
        slow_every_s: float = 1.0,
        check: Callable[[], str | None] | None = None,
        check_every_s: float = 0.5,
    ) -> None:
        self.store, self.events, self.clock = store, events, clock
        self.period = 1.0 / hz
        self.host, self.gpu = host, gpu
        self.active = list(uuids or []) if gpu is not None else []
        self.slow_every_s = slow_every_s
        self.check, self.check_every_s = check, check_every_s
        self.stats = LoopStats()
        self._errors: dict[str, int] = {}

    def _error(self, device: str, what: str, exc: BaseException) -> None:
        self.stats.errors += 1
        n = self._errors[device] = self._errors.get(device, 0) + 1
        if n <= _MAX_ERRORS_LOGGED:
            detail = f"{what}: {exc!r}"
            self.events.add(time_ms=self.clock.time_ms(), kind="error", device=device, detail=detail)

    def _sample(self, tick: int, slow: bool) -> None:
        if self.host is not None:
            try:
                row = self.host.read(slow)
                self.store.add({"time_ms": self.clock.time_ms(), "tick": tick, "device": HOST_DEVICE, **row})
            except Exception as e:  # psutil trouble must not end GPU sampling
                self._error(HOST_DEVICE, "host read", e)
        if self.gpu is None:
            return
        for uuid in list(self.active):
            t_ms = self.clock.time_ms()
            try:
                row = self.gpu.read_fast(uuid)
                if slow:
                    row.update(self.gpu.read_slow(uuid))
            except DeviceLost as e:
                self.active.remove(uuid)
                self.stats.lost[uuid] = str(e)
                self.events.add(time_ms=t_ms, kind="gpu_lost", device=uuid, detail=str(e))
                continue
            except Exception as e:
                self._error(uuid, "GPU read", e)
                continue
            self.store.add({"time_ms": t_ms, "tick": tick, "device": uuid, **row})

    def run(self, stop: threading.Event, on_first_tick: Callable[[], None] | None = None) -> LoopStats:
        """Sample until ``stop`` is set or the check says why to stop; a last sample is taken then, so
        a run window that ends just before the stop is still bracketed by samples."""
        clock, period = self.clock, self.period
        t0 = clock.monotonic()
        last_slow = last_check = -math.inf
        k = 0
        while True:
            now = clock.monotonic()
            slow = now - last_slow >= self.slow_every_s - period / 2
            if slow:
                last_slow = now
            self._sample(k, slow)
            self.stats.ticks += 1
            if k == 0 and on_first_tick is not None:
                on_first_tick()
            if self.check is not None and now - last_check >= self.check_every_s:
                last_check = now
                reason = self.check()
                if reason:
                    self.stats.stop_reason = reason
                    break
            nxt = k + 1
            behind = int((clock.monotonic() - t0) / period) - nxt  # deadlines after nxt already gone
            if behind > 0:
                self.stats.overruns += behind
                nxt += behind
            if clock.sleep_until(t0 + nxt * period, stop):
                self.stats.stop_reason = "stopped by signal"
                self._sample(nxt, True)
                self.stats.ticks += 1
                break
            k = nxt
        return self.stats


class XidWatcher(threading.Thread):
    """XID waits block inside NVML, so they get their own thread; events are logged as they come."""

    def __init__(self, backend: GpuBackend, events: EventLog, clock: Clock, poll_ms: int = 250) -> None:
        super().__init__(name="xid-watcher", daemon=True)
        self.backend, self.events, self.clock, self.poll_ms = backend, events, clock, poll_ms
        self.stop_event = threading.Event()
        self.count = 0

    def _drain(self, timeout_ms: int) -> None:
        for ev in self.backend.wait_xid(timeout_ms):
            self.count += 1
            self.events.add(
                time_ms=ev.time_ms if ev.time_ms is not None else self.clock.time_ms(),
                kind="xid",
                device=ev.uuid,
                xid=ev.xid,
                gpu_instance=ev.gpu_instance,
                compute_instance=ev.compute_instance,
            )

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self._drain(self.poll_ms)
        except Exception as e:
            detail = f"XID watcher: {e!r}"
            self.events.add(time_ms=self.clock.time_ms(), kind="error", device=None, detail=detail)

    def finish(self) -> None:
        """Stop the thread and collect what arrived meanwhile."""
        self.stop_event.set()
        self.join(timeout=self.poll_ms / 1000 + 2.0)
        if not self.is_alive():
            with contextlib.suppress(Exception):
                self._drain(0)
