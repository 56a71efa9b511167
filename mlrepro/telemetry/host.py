"""Host backend: system CPU and memory (psutil), and the watched process tree's RSS and CPU.

Under docker/podman the training process is no descendant of the watched run driver: the engine
reports the container's init pid (its host pid) into the file ``$MLREPRO_TELEMETRY_ROOTS`` names,
and that process's tree is measured with the driver's.

The tree is read every tick, so on Linux its members' counters come straight from
``/proc/<pid>/stat`` (one read gives CPU time and RSS, a few times cheaper than psutil's two calls)
and its membership from ``/proc/<pid>/task/*/children`` once a second (psutil's recursive
``children()`` scans every process on the machine). Elsewhere psutil does both.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from mlrepro.telemetry.backend import Value

HOST_FIELDS: tuple[str, ...] = (
    "host_cpu_pct",  # all cores, 0-100
    "host_mem_used_bytes",  # total - available, once a second
    "proc_rss_bytes",  # the watched process tree
    "proc_cpu_pct",  # the watched process tree, % of one core
    "proc_count",
)
_PROC = Path("/proc")
_LINUX = (_PROC / "self" / "stat").exists()
_TICK = os.sysconf("SC_CLK_TCK") if _LINUX else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if _LINUX else 4096

Stat = tuple[float, int, float]  # (cpu seconds, rss bytes, start time): start time tells a reused pid apart


def read_stat(pid: int) -> Stat | None:
    """CPU time, RSS and start time of one process; None when it is gone."""
    if not _LINUX:
        try:
            p = psutil.Process(pid)
            with p.oneshot():
                t = p.cpu_times()
                return t.user + t.system, p.memory_info().rss, p.create_time()
        except psutil.Error:
            return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()  # the command name may hold spaces and parentheses
    if fields[0] == b"Z":  # a zombie has no memory and will use no more CPU
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK, int(fields[21]) * _PAGE, float(fields[19])


def tree_pids(root: int) -> list[int]:
    """The process and all its descendants."""
    if not _LINUX:
        try:
            p = psutil.Process(root)
            return [root, *(c.pid for c in p.children(recursive=True))]
        except psutil.Error:
            return []
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:  # exited meanwhile, or a kernel without the children file
            continue
    return out


ROOTS_ENV = "MLREPRO_TELEMETRY_ROOTS"


def extra_roots(path: str | None) -> list[int]:
    """Pids written one a line into ``path`` (container init processes); none when it is absent."""
    if not path:
        return []
    try:
        return [int(x) for x in Path(path).read_text().split() if x.isdigit()]
    except OSError:
        return []


class HostSampler:
    def __init__(self, watch_pid: int | None, tree_refresh_s: float = 1.0, roots_file: str | None = None) -> None:
        self.watch_pid = watch_pid
        self.roots_file = roots_file or os.environ.get(ROOTS_ENV)
        self.tree_refresh_s = tree_refresh_s
        self._pids: list[int] = []
        self._prev: dict[tuple[int, float], float] = {}  # (pid, start time) -> cpu seconds
        self._prev_t: float | None = None
        self._tree_t = -1e9
        self.mem_total_bytes = psutil.virtual_memory().total
        psutil.cpu_percent(interval=None)  # the first call only sets the baseline

    def read(self, slow: bool = True) -> dict[str, Value]:
        now = time.monotonic()
        row: dict[str, Value] = {"host_cpu_pct": psutil.cpu_percent(interval=None)}
        if slow:
            vm = psutil.virtual_memory()
            row["host_mem_used_bytes"] = vm.total - vm.available
        if self.watch_pid is None:
            return row
        if now - self._tree_t >= self.tree_refresh_s:
            pids = tree_pids(self.watch_pid)
            for root in extra_roots(self.roots_file):
                pids += [p for p in tree_pids(root) if p not in pids]
            self._tree_t, self._pids = now, pids
        rss, cpu_delta, cur = 0, 0.0, {}
        for pid in self._pids:
            st = read_stat(pid)
            if st is None:
                continue
            cpu, mem, start = st
            cur[(pid, start)] = cpu
            rss += mem
            # a member first seen now counts from here: its earlier CPU time is not this interval's
            cpu_delta += cpu - self._prev.get((pid, start), cpu)
        row["proc_count"] = len(cur)
        if cur:
            row["proc_rss_bytes"] = rss
            if self._prev_t is not None and now > self._prev_t:
                row["proc_cpu_pct"] = 100.0 * max(cpu_delta, 0.0) / (now - self._prev_t)
        self._prev, self._prev_t = cur, now
        return row
