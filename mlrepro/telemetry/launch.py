"""Start and stop the sampler process beside a run; nothing here ever raises into the caller."""

from __future__ import annotations

import contextlib
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
from typing import IO

import mlrepro
from mlrepro.core import untrusted_dir
from mlrepro.telemetry.store import (
    CHUNKS,
    EVENTS,
    LOG,
    NODES,
    NODES_DIR,
    SAMPLES,
    SIDECAR,
    SUMMARY,
    read_sidecar,
    write_sidecar,
)


class ForkedSampler:
    """A sampler forked from the calling process instead of a new interpreter (which would import
    psutil and the sampler's modules again); as much of subprocess.Popen as the handle uses."""

    def __init__(self, pid: int, stdout: IO[bytes]) -> None:
        self.pid, self.stdout, self.returncode = pid, stdout, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"sampler {self.pid}", timeout or 0)
            time.sleep(0.01)
        return code


def _fork_sampler(argv: list[str], log: Path) -> ForkedSampler:
    """Fork, and run the sampler's main in the child with its stdout on a pipe and stderr in ``log``,
    as the spawned one has them. The caller must have no threads running (fork copies only itself)."""
    from mlrepro.telemetry import sampler

    for stream in (sys.stdout, sys.stderr):  # the child must not write what this process has buffered
        stream.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            os.dup2(write, 1)
            os.close(write)
            err = untrusted_dir.open_append(log.parent, log.name)  # in a run folder: no link followed
            os.dup2(err, 2)
            os.close(err)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            # as a spawned one (close_fds): the caller's other files, its GPU locks among them, are not the sampler's
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            # the caller's sys.stdout may be no stream of fd 1 (a test's capture): the sampler's are its fds 1 and 2
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            code = sampler.main(argv)
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os._exit(code)
    os.close(write)
    return ForkedSampler(pid, os.fdopen(read, "rb"))


@dataclass
class SamplerHandle:
    out_dir: Path
    proc: subprocess.Popen[bytes] | ForkedSampler | None
    status: str  # "running", or "failed: <reason>" when the sampler could not start
    started: dict[str, str] = field(default_factory=dict)
    stop_signal: int = signal.SIGTERM  # SIGUSR1 for srun's samplers on other nodes (mlrepro/telemetry/nodes.py)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (or ``stop_signal``), let it flush and exit; SIGKILL after ``timeout_s``. Never raises."""
        try:
            if self.proc is None:
                return
            if self.proc.poll() is None:
                self.proc.send_signal(self.stop_signal)
                try:
                    self.proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    # the sidecar then still says "running": summarize reports the samples as partial
                    self.proc.kill()
                    self.proc.wait(5)
        except Exception:
            pass


def _clear_previous(out_dir: Path) -> None:
    # a previous run's files in the same folder must not pass for this run's, nor its other nodes' for this one's
    for name in (SAMPLES, SIDECAR, EVENTS, SUMMARY, NODES):
        (out_dir / name).unlink(missing_ok=True)
    for name in (CHUNKS, NODES_DIR):
        shutil.rmtree(out_dir / name, ignore_errors=True)


def sampler_env() -> dict[str, str]:
    """This process's environment, with which the sampler imports the same mlrepro as this process, installed or
    not."""
    env = dict(os.environ)
    root = str(Path(mlrepro.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


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


def log_tail(log: Path, n: int = 400) -> str:
    try:
        return log.read_text(errors="replace")[-n:].strip()
    except OSError:
        return ""


def read_lines(stream: IO[bytes], count: int, timeout_s: float) -> list[bytes]:
    """Up to ``count`` whole lines from ``stream`` (the samplers' "I am sampling" words), fewer at EOF or once
    ``timeout_s`` has passed."""
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while buf.count(b"\n") < count and (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                break
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break  # EOF: the sampler exited
            buf += chunk
    return buf.split(b"\n")[:-1][:count]


def start_sampler(
    out_dir: Path,
    hz: float = 10.0,
    watch_pid: int | None = None,
    *,
    backend: str = "nvml",
    host: bool = True,
    flush_every_s: float = 5.0,
    ready_timeout_s: float = 60.0,
    fork: bool = False,
) -> SamplerHandle:
    """Spawn ``python -m mlrepro.telemetry.sampler`` and return once it samples or has said why not.

    The sampler exits by itself when ``watch_pid`` (or this process, its parent) exits.
    ``backend`` is "nvml", "none" or "replay:TRACE.json" (tests and demos); samples reach disk every
    ``flush_every_s``, which bounds what a killed sampler loses. ``fork``: fork this process for it
    instead of starting an interpreter (the run driver, which has no other thread).
    """
    out_dir = Path(out_dir)
    proc: subprocess.Popen[bytes] | ForkedSampler | None = None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _clear_previous(out_dir)
        cmd = [
            sys.executable, "-P", "-m", "mlrepro.telemetry.sampler", "--out-dir", str(out_dir), "--hz", str(hz),
            "--parent-pid", str(os.getpid()), "--backend", backend, "--flush-every-s", str(flush_every_s),
        ]
        if watch_pid is not None:
            cmd += ["--watch-pid", str(watch_pid)]
        if not host:
            cmd.append("--no-host")
        env = sampler_env()
        if fork:
            proc = _fork_sampler(cmd[4:], out_dir / LOG)
        else:
            with os.fdopen(untrusted_dir.open_append(out_dir, LOG), "ab") as log:  # no link followed
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env
                )
        assert proc.stdout is not None
        lines = read_lines(proc.stdout, 1, ready_timeout_s)
        proc.stdout.close()
        if not lines:
            if proc.poll() is None:
                reason = f"sampler not ready after {ready_timeout_s:.0f} s"
                SamplerHandle(out_dir, proc, "failed").stop(5)
            else:
                reason = f"sampler exited with code {proc.returncode}: {log_tail(out_dir / LOG)}"
            _record_failure(out_dir, hz, watch_pid, reason)
            return SamplerHandle(out_dir, proc, f"failed: {reason}")
        said: dict[str, str] = json.loads(lines[0])
        if said.get("status") != "running":
            return SamplerHandle(out_dir, proc, f"failed: {said.get('reason')}", said)
        return SamplerHandle(out_dir, proc, "running", said)
    except Exception as e:
        reason = f"could not start the sampler: {type(e).__name__}: {e}"
        if proc is not None and proc.poll() is None:
            SamplerHandle(out_dir, proc, "failed").stop(5)
        _record_failure(out_dir, hz, watch_pid, reason)
        return SamplerHandle(out_dir, proc, f"failed: {reason}")
