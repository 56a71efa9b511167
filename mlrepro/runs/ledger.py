"""The run ledger: one line when a run is launched and one when it ends, in its run folder.

``<run folder>/ledger.jsonl`` is append-only: every line is written with ``O_APPEND`` in one
``write`` and fsync'd, so a failed, aborted or re-run launch stays on record next to the one that
was packaged, and a killed launch leaves its ``launch`` line without an ``end`` line. The
provenance manifest (mlrepro/package/provenance.py) copies every ledger of a package's benchmarks, so
that no run can be dropped silently.

The run driver wraps its work in :func:`recorded`.
"""

from __future__ import annotations

import contextlib
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

LEDGER = "ledger.jsonl"
RESULT = "result.txt"  # the run step's result file, whose hash the end line records


class Terminated(BaseException):
    """SIGTERM (Snakemake or Slurm cancelling the job) raised where the driver is."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated(f"signal {signum}")


def append(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, appended in one write and fsync'd: concurrent writers never interleave a line."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str | None:
    from mlrepro.core.hashing import sha256_file  # the one file hasher of the project

    return sha256_file(path) if path.is_file() else None


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
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
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
