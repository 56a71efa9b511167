"""Every timed run has its accelerators to itself; which ones, the machine that runs it says, never the planning host.

Inside a Slurm allocation the run's GPUs are the allocation's: on each node those Slurm gave the job (its GRES,
``scontrol show job -d``, or the batch step's CUDA_VISIBLE_DEVICES); Slurm keeps jobs apart, so no lock is taken.
Without a scheduler they are this machine's (NVML, or the config's ``gpus: N``), shared by every run on it: one
lock file per GPU (``flock``, held for the run's whole life; a killed run frees its GPUs with its process) in a
folder per host, not per output folder, so that two pipelines (two output folders, or two users with a shared
folder) never give one GPU to two timed runs. Snakemake's local ``resources: gpus`` only queues the jobs.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import stat
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlrepro.core.errors import MlreproError


class GpuError(MlreproError, RuntimeError):
    pass


def machine_gpus() -> int:
    """GPUs NVML sees on this machine; 0 without NVML or a driver."""
    from mlrepro.core.probe import gpus

    return len(gpus()["devices"])


def _indices(text: str) -> list[int]:
    """``0-3,6`` -> [0, 1, 2, 3, 6]."""
    found: list[int] = []
    for part in text.split(","):
        if m := re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip()):
            found += range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1)
    return found


def allocated_gpus(env: Mapping[str, str], host: str | None = None) -> list[int]:
    """The GPUs of this node that the Slurm job holds: the GRES indices scontrol reports for this host, else the
    batch step's CUDA_VISIBLE_DEVICES; none where the job asked for none."""
    job_id = env["SLURM_JOB_ID"]
    host = host or socket.gethostname().split(".")[0]
    try:
        out = subprocess.run(["scontrol", "show", "job", "-d", job_id], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():  # "   Nodes=node1 CPU_IDs=0-3 Mem=0 GRES=gpu:4(IDX:0-3)"
        idx = re.search(r"GRES=\S*?gpu[^(]*\(IDX:([0-9,\-]+)\)", line)
        if idx and (m := re.search(r"Nodes=(\S+)", line)) and _covers(m.group(1), host):
            return _indices(idx.group(1))
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    return _indices(visible) if visible and visible != "NoDevFiles" else []


def _covers(node_list: str, host: str) -> bool:
    if node_list == host:
        return True
    try:
        names = subprocess.run(["scontrol", "show", "hostnames", node_list], capture_output=True, text=True,
                               timeout=30, check=False).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return False
    return host in names


def lock_dir(configured: str | None) -> Path:
    """The folder of this host's GPU lock files (config ``gpu_lock_dir``): by default the user's own
    ($XDG_RUNTIME_DIR/mlrepro/gpu-locks, else ~/.cache/mlrepro/runtime/gpu-locks: mlrepro.core.private_dir), made
    mode 0700 and checked to be the user's on every use; a configured folder shared by several users must be root's
    with the sticky bit (as /run/lock)."""
    if configured:
        folder = Path(configured)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_parents(folder)
        info = folder.lstat()
        private = info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077 == 0
        shared = info.st_uid == 0 and info.st_mode & stat.S_ISVTX
        if stat.S_ISLNK(info.st_mode) or not (private or shared):
            raise GpuError(f"gpu_lock_dir {folder}: owned by uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}; "
                           f"use a folder of yours with mode 0700 (one made under umask 002 is group-writable: chmod "
                           f"700 {folder}), or a root-owned sticky one (mode 1777) shared by every user of this host's "
                           "GPUs")
        return folder
    from mlrepro.core import private_dir  # the user's runtime folders: one owner of their checks

    try:
        return private_dir.runtime_dir("gpu-locks")
    except private_dir.PrivateDirError as e:
        raise GpuError(f"the GPU lock folder must be yours with mode 0700: {e}; remove it, or set "
                       "gpu_lock_dir") from None


def _check_parents(folder: Path) -> None:
    """GpuError where a folder above the lock folder lets another user rename it away and put theirs in its place:
    writable by others without the sticky bit (as /tmp has), and not this user's or root's."""
    for parent in Path(os.path.abspath(folder)).parents:
        info = parent.stat()
        if info.st_mode & 0o002 and not info.st_mode & stat.S_ISVTX:
            raise GpuError(f"gpu_lock_dir {folder}: its parent {parent} is writable by every user without the sticky "
                           f"bit (mode {stat.S_IMODE(info.st_mode):o}), so another user could swap the lock folder; "
                           "choose a lock folder under a folder only you (or root) can write, or with mode 1777")


def _open_lock(path: Path) -> int:
    """A lock file, opened without following a link or waiting on a FIFO that another user of a shared lock folder put
    there; GpuError naming it where it is not a regular file."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)  # flock works on a read-only descriptor: another user's file locks too
    except OSError as e:
        raise GpuError(f"GPU lock {path}: cannot be opened ({e.strerror}); a symlink or a special file there is not "
                       "a lock: remove it (the lock folder's owner can)") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise GpuError(f"GPU lock {path}: not a regular file (a FIFO, device or folder), so it cannot hold a GPU; "
                       "remove it (the lock folder's owner can)")
    return fd


@contextmanager
def claim(lock_folder: Path, total: int, count: int, timeout_s: float = 600.0) -> Iterator[list[int]]:
    """Hold ``count`` of this machine's ``total`` GPUs (their indices) until the block ends; GpuError after
    ``timeout_s``."""
    if count == 0:
        yield []
        return
    if count > total:
        raise GpuError(f"the run needs {count} GPUs but this machine has {total} (config gpus); choose a config "
                       "file with fewer (DGXNNODES x DGXNGPU) or run it where there are more (profiles/slurm: on "
                       "the allocation's nodes)")
    deadline = time.monotonic() + timeout_s
    while True:
        held: list[tuple[int, int]] = []
        for i in range(total):
            fd = _open_lock(lock_folder / f"gpu{i}.lock")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            held.append((i, fd))
            if len(held) == count:
                break
        if len(held) == count:
            break
        for _, fd in held:  # not enough free: let go, so two runs never wait on each other's halves
            os.close(fd)
        if time.monotonic() > deadline:
            raise GpuError(f"no {count} free GPUs of {total} after {timeout_s:.0f} s (locks in {lock_folder}); "
                           "another pipeline on this host holds them")
        time.sleep(0.2)
    try:
        yield [i for i, _ in held]
    finally:
        for _, fd in held:
            os.close(fd)


def identify(backend: str, gpus: list[int]) -> dict[str, Any]:
    """The accelerators a run used, as the GPU backend names them (NVML; a replayed trace in tests and demos, as the
    run's telemetry reads it: ``telemetry_backend``): their count, names and memory, recorded in run.json so that a
    reproduction's time is compared only on the same hardware class. None found: ``unknown`` says why."""
    if not gpus:
        return {"count": 0, "devices": []}
    from mlrepro.telemetry.backend import BackendUnavailable
    from mlrepro.telemetry.loop import RealClock
    from mlrepro.telemetry.sampler import make_backend

    try:
        source = make_backend(backend, RealClock())
        if source is None:
            return {"count": len(gpus), "devices": [], "unknown": f"telemetry backend {backend}"}
        source.open()
        try:
            by_index = {d.index: d for d in source.devices()}
            devices = [{"index": i, "name": by_index[i].name, "uuid": by_index[i].uuid,
                        "memory_bytes": source.read_slow(by_index[i].uuid).get("mem_total_bytes")}
                       for i in gpus if i in by_index]
        finally:
            source.close()
    except (BackendUnavailable, ImportError, OSError, RuntimeError, ValueError, KeyError) as e:
        return {"count": len(gpus), "devices": [], "unknown": f"{type(e).__name__}: {e}"[:500]}
    missing = [i for i in gpus if i not in by_index]
    return {"count": len(gpus), "devices": devices,
            **({"unknown": f"the backend does not see GPU {missing}"} if missing else {})}
