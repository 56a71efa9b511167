"""The run ledger: one line when a run is launched and one when it ends, in its run folder.

``<run folder>/ledger.jsonl`` is append-only: every line is written whole under a lock (a short write,
the disk full, is cut back off and fails loudly) and fsync'd; a torn last line left by a crash is
skipped by readers and cut off by the next append. So a failed, aborted or re-run launch stays on
record next to the one that was packaged, and a killed launch leaves its ``launch`` line without an ``end`` line. The
provenance manifest (mlrepro/package/provenance.py) copies every ledger of a package's benchmarks, so
that no run can be dropped silently.

The run driver wraps its work in :func:`recorded`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlrepro.core import untrusted_dir
from mlrepro.core.errors import MlreproError

LEDGER = "ledger.jsonl"
RESULT = "result.txt"  # the run step's result file, whose hash the end line records
MAX_BYTES = 64 << 20  # a ledger read back: two short lines a launch


class Terminated(BaseException):
    """SIGTERM (Snakemake or Slurm cancelling the job) raised where the driver is."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated(f"signal {signum}")


class LedgerError(MlreproError, OSError):
    """A line that could not be appended whole (the disk full, say): the ledger is left as it was."""


def _repair_tail(fd: int, size: int) -> int:
    """Cut a torn last line (one without its newline: a writer killed mid-write on an older version, or a
    crash of the file system) so that the next line starts on its own; the new size."""
    end = size
    while end > 0:
        start = max(0, end - (1 << 16))
        chunk = os.pread(fd, end - start, start)
        if end == size and chunk.endswith(b"\n"):
            return size
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            os.ftruncate(fd, start + cut + 1)
            return start + cut + 1
        end = start
    if size:
        os.ftruncate(fd, 0)
    return 0


def append(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, appended whole or not at all, and fsync'd: under an exclusive lock, so that concurrent
    writers never interleave a line and a short write (ENOSPC) is cut back off before :class:`LedgerError`. The run's
    code can write into its folder: a ledger that is a link, another user's file or not a regular file is refused
    (:class:`~mlrepro.core.untrusted_dir.PlantedLink`) before anything is cut or written."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = untrusted_dir.open_append(path.parent, path.name, read=True)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = _repair_tail(fd, os.fstat(fd).st_size)
        written = 0
        try:
            while written < len(line):
                n = os.write(fd, line[written:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                written += n
            os.fsync(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise LedgerError(e.errno, f"{path}: the run ledger's {record.get('event', '')} line could not be "
                                       f"written whole ({e.strerror}); the ledger is kept as it was. Free space "
                                       "and run again") from e
    finally:
        os.close(fd)


def _sha256(path: Path) -> str | None:
    """The hash of the run's result file, which the driver wrote; None where there is none, or something else is
    there (the run's code left a link: nothing is read through it)."""
    import hashlib

    try:
        return hashlib.sha256(untrusted_dir.read_bytes(path.parent, path.name, MAX_BYTES << 2)).hexdigest()
    except (FileNotFoundError, untrusted_dir.PlantedLink):
        return None


@contextlib.contextmanager
def recorded(run_dir: Path, *, benchmark: str, seed: int) -> Iterator[str]:
    """Record this launch of the run in ``run_dir``; yield its id. The end line says how it ended:
    success, failed (the error) or aborted (SIGTERM, Ctrl-C); a SIGKILL leaves no end line."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LEDGER
    launch = uuid.uuid4().hex
    append(path, {"event": "launch", "launch": launch, "benchmark": benchmark, "run": run_dir.name, "seed": seed,
                  "time": time.time(), "host": socket.gethostname(), "pid": os.getpid(),
                  "slurm_job_id": os.environ.get("SLURM_JOB_ID")})
    # Only the main thread may set a handler; elsewhere a SIGTERM leaves the launch without an end line.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    status, exit_status, error = "failed", 1, None
    try:
        yield launch
        status, exit_status = "success", 0
    except (Terminated, KeyboardInterrupt) as e:
        status, exit_status, error = "aborted", 143 if isinstance(e, Terminated) else 130, type(e).__name__
        raise
    except SystemExit as e:
        exit_status = e.code if isinstance(e.code, int) else 1
        status = "success" if exit_status == 0 else "failed"
        error = None if exit_status == 0 else str(e.code)[:2000]
        raise
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"[:2000]
        raise
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
        append(path, {"event": "end", "launch": launch, "time": time.time(), "status": status,
                      "exit_status": exit_status, "error": error,
                      "result_sha256": _sha256(run_dir / RESULT) if status == "success" else None})


def read(path: Path) -> list[dict[str, Any]]:
    """One record per launch (launch and end lines joined), in launch order. A launch without an end
    line has ``status`` "no end record" (killed, or still running)."""
    launches: dict[str, dict[str, Any]] = {}
    text = untrusted_dir.read_bytes(path.parent, path.name, MAX_BYTES).decode("utf-8", errors="replace")
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if n == len(lines) and not text.endswith("\n"):
                break  # a torn last line (cut off mid-write): no record; the next append cuts it off
            raise ValueError(f"{path}:{n}: not a JSON line ({e})") from None
        if rec.get("event") == "launch":
            launches[rec["launch"]] = {
                "launch": rec["launch"], "benchmark": rec.get("benchmark"), "run": rec.get("run"),
                "seed": rec.get("seed"), "start": rec.get("time"), "host": rec.get("host"),
                "slurm_job_id": rec.get("slurm_job_id"), "stop": None, "status": "no end record",
                "exit_status": None, "error": None, "result_sha256": None}
        elif rec.get("event") == "end" and rec.get("launch") in launches:
            launches[rec["launch"]].update(stop=rec.get("time"), status=rec.get("status"),
                                           exit_status=rec.get("exit_status"), error=rec.get("error"),
                                           result_sha256=rec.get("result_sha256"))
    return list(launches.values())
