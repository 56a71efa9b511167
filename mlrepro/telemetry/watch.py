"""The process a sampler watches: is it still alive, and which GPUs does it see."""

from __future__ import annotations

import os

import psutil

from mlrepro.telemetry.host import read_stat


class Watched:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.proc = psutil.Process(pid)  # raises at once when there is no such process
        first = read_stat(pid)
        self._start = first[2] if first else None

    def alive(self) -> bool:
        """False once it exited, is a zombie (exited, not yet reaped) or its pid was reused."""
        st = read_stat(self.pid)
        return st is not None and st[2] == self._start

    def cuda_visible_devices(self) -> tuple[str | None, str]:
        """The run's CUDA_VISIBLE_DEVICES (from its environment when readable) and where it came from."""
        try:
            env = self.proc.environ()
            return env.get("CUDA_VISIBLE_DEVICES"), f"environment of pid {self.pid}"
        except psutil.Error:
            return os.environ.get("CUDA_VISIBLE_DEVICES"), "sampler's own environment"
