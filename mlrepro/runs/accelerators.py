"""Every timed run has its accelerators to itself.

Snakemake bounds how many GPUs the running jobs hold together (``resources: gpus``, the default
profile passes this machine's count); which GPUs each run gets is decided here: one lock file per
GPU under the output folder, held (``flock``) for the run's whole life, so concurrent runs see
disjoint ``CUDA_VISIBLE_DEVICES`` sets and a killed run frees its GPUs with its process.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def machine_gpus() -> int:
    """GPUs NVML sees on this machine; 0 without NVML or a driver (the default profile's --resources gpus)."""
    from mlrepro.core.probe import gpus

    return len(gpus()["devices"])


@contextmanager
def claim(lock_dir: Path, total: int, count: int, timeout_s: float = 600.0) -> Iterator[list[int]]:
    """Hold ``count`` of the ``total`` GPUs (their indices) until the block ends; RuntimeError after ``timeout_s``."""
    if count == 0:
        yield []
        return
    if count > total:
        raise RuntimeError(f"the run needs {count} GPUs but this machine has {total} (config gpus); "
                           "choose a config file with fewer (DGXNNODES x DGXNGPU) or run it where there are more")
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        held: list[tuple[int, int]] = []
        for i in range(total):
            fd = os.open(lock_dir / f"gpu{i}.lock", os.O_RDWR | os.O_CREAT, 0o644)
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
            raise RuntimeError(f"no {count} free GPUs of {total} after {timeout_s:.0f} s (locks in {lock_dir}); "
                               "something outside this pipeline holds them, or --resources gpus exceeds config gpus")
        time.sleep(0.2)
    try:
        yield [i for i, _ in held]
    finally:
        for _, fd in held:
            os.close(fd)
