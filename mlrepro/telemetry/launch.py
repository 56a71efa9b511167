"""Start and stop the sampler process beside a run; nothing here ever raises into the caller."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import mlrepro
from mlrepro.telemetry.store import (
    CHUNKS,
    EVENTS,
    LOG,
    SAMPLES,
    SIDECAR,
    SUMMARY,
    read_sidecar,
    write_sidecar,
)


@dataclass
class SamplerHandle:
    out_dir: Path
    proc: subprocess.Popen[bytes] | None
    status: str  # "running", or "failed: <reason>" when the sampler could not start
    started: dict[str, str] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, let it flush and exit; SIGKILL after ``timeout_s``. Never raises."""
        try:
            if self.proc is None:
                return
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    # the sidecar then still says "running": summarize reports the samples as partial
                    self.proc.kill()
                    self.proc.wait(5)
        except Exception:
            pass


def _clear_previous(out_dir: Path) -> None:
    # a previous run's files in the same folder must not pass for this run's
    for name in (SAMPLES, SIDECAR, EVENTS, SUMMARY):
        (out_dir / name).unlink(missing_ok=True)
    shutil.rmtree(out_dir / CHUNKS, ignore_errors=True)


def _record_failure(out_dir: Path, hz: float, watch_pid: int | None, reason: str) -> None:
    try:
        if read_sidecar(out_dir) is None:
            write_sidecar(
                out_dir,
                {
                    "schema": 1,
                    "status": "failed",
                    "partial": True,
                    "reasons": [reason],
                    "config": {"hz": hz, "watch_pid": watch_pid},
                },
            )
    except Exception:
        pass


def _log_tail(out_dir: Path, n: int = 400) -> str:
    try:
        return (out_dir / LOG).read_text(errors="replace")[-n:].strip()
    except OSError:
        return ""


def start_sampler(
    out_dir: Path,
    hz: float = 10.0,
    watch_pid: int | None = None,
    *,
    backend: str = "nvml",
    host: bool = True,
    flush_every_s: float = 5.0,
    ready_timeout_s: float = 60.0,
) -> SamplerHandle:
    """Spawn ``python -m mlrepro.telemetry.sampler`` and return once it samples or has said why not.

    The sampler exits by itself when ``watch_pid`` (or this process, its parent) exits.
    ``backend`` is "nvml", "none" or "replay:TRACE.json" (tests and demos); samples reach disk every
    ``flush_every_s``, which bounds what a killed sampler loses.
    """
    out_dir = Path(out_dir)
    proc: subprocess.Popen[bytes] | None = None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _clear_previous(out_dir)
        cmd = [
            sys.executable, "-m", "mlrepro.telemetry.sampler", "--out-dir", str(out_dir), "--hz", str(hz),
            "--parent-pid", str(os.getpid()), "--backend", backend, "--flush-every-s", str(flush_every_s),
        ]
        if watch_pid is not None:
            cmd += ["--watch-pid", str(watch_pid)]
        if not host:
            cmd.append("--no-host")
        env = dict(os.environ)
        # the sampler must import the same mlrepro as this process, installed or not
        root = str(Path(mlrepro.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        with (out_dir / LOG).open("ab") as log:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env
            )
        assert proc.stdout is not None
        line = b""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + ready_timeout_s
            while not line.endswith(b"\n") and (left := deadline - time.monotonic()) > 0:
                if not sel.select(left):
                    break
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    break  # EOF: the sampler exited before saying anything
                line += chunk
        proc.stdout.close()
        if not line.endswith(b"\n"):
            if proc.poll() is None:
                reason = f"sampler not ready after {ready_timeout_s:.0f} s"
                SamplerHandle(out_dir, proc, "failed").stop(5)
            else:
                reason = f"sampler exited with code {proc.returncode}: {_log_tail(out_dir)}"
            _record_failure(out_dir, hz, watch_pid, reason)
            return SamplerHandle(out_dir, proc, f"failed: {reason}")
        said: dict[str, str] = json.loads(line)
        if said.get("status") != "running":
            return SamplerHandle(out_dir, proc, f"failed: {said.get('reason')}", said)
        return SamplerHandle(out_dir, proc, "running", said)
    except Exception as e:
        reason = f"could not start the sampler: {type(e).__name__}: {e}"
        if proc is not None and proc.poll() is None:
            SamplerHandle(out_dir, proc, "failed").stop(5)
        _record_failure(out_dir, hz, watch_pid, reason)
        return SamplerHandle(out_dir, proc, f"failed: {reason}")
