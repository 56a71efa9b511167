"""One pipeline at a time per output folder.

Snakemake locks the working directory's ``.snakemake``, not the output folder: two invocations
from different working directories on one ``outdir`` would run the same jobs and clean up each
other's outputs. This lock lives in the output folder itself (``flock`` on ``.mlrepro.lock``): the
kernel releases it when the holding process ends, however it ends, so a killed pipeline never
leaves a stale lock. The file names the holder, for the refusal message.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
from pathlib import Path

from mlrepro.core.errors import MlreproError

LOCK_NAME = ".mlrepro.lock"

# The open descriptors of the locks this process holds (closing one would release its lock).
_held: dict[str, int] = {}


class OutdirLocked(MlreproError, RuntimeError):
    pass


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return (f"pid {info['pid']} on {info['host']}, working directory {info['cwd']}, "
                f"since {info['since']}")
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not yet recorded itself"


def acquire(outdir: Path) -> Path:
    """Hold the lock of ``outdir`` until this process exits; raise OutdirLocked naming the holder."""
    path = (outdir / LOCK_NAME).resolve()
    if str(path) in _held:
        return path
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise OutdirLocked(f"output folder {outdir}: cannot write its lock file {path} ({e.strerror}); "
                           "the output folder must be writable") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OutdirLocked(
            f"output folder {outdir} is in use by another mlrepro pipeline: {_holder(path)}. "
            f"Wait for it to finish (or stop it), or choose another outdir; the lock ({path}) is released "
            "when that process exits.") from None
    info = {"pid": os.getpid(), "host": socket.gethostname(), "cwd": os.getcwd(),
            "since": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
    _held[str(path)] = fd
    return path
