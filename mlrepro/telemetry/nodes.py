"""Telemetry on every node of a run over several nodes: one sampler on each node of the Slurm allocation.

The run driver's own sampler (:func:`mlrepro.telemetry.launch.start_sampler`) covers the batch host, where the
driver runs, as on one node. One ``srun`` step with one task on each other node of the allocation
(:func:`mlrepro.slurm.launch.on_each`, beside the ranks' step) starts theirs; each writes into
``NODES_DIR/<its host name>/`` of the run's telemetry folder (a file system every node shares, as the run's folder
is). ``NODES`` records the nodes expected and how each one's sampler started, so that a node whose sampler never
wrote a thing is still named in the summary (:func:`mlrepro.telemetry.summary.summarize` merges the nodes).
Nothing here raises into the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlrepro.core import atomic, untrusted_dir
from mlrepro.telemetry.launch import SamplerHandle, log_tail, read_lines, sampler_env
from mlrepro.telemetry.store import NODES, NODES_DIR

NODES_LOG = "nodes.log"  # srun's own output for the step, and the samplers' errors


def _announced(lines: list[bytes]) -> dict[str, str]:
    """Each host's word from its sampler: "running", or "failed: <why>"."""
    said: dict[str, str] = {}
    for line in lines:
        try:
            word = json.loads(line)
            host = str(word["host"])
        except (ValueError, KeyError, TypeError):
            continue  # not a sampler's line
        said[host] = "running" if word.get("status") == "running" else f"failed: {word.get('reason')}"
    return said


def start_on_nodes(out_dir: Path, job_id: str, names: list[str], hz: float, backend: str = "nvml",
                   flush_every_s: float = 5.0, ready_timeout_s: float = 60.0) -> SamplerHandle:
    """Start one sampler on each of ``names`` (nodes of job ``job_id``) and return once each samples or has said
    why not, or ``ready_timeout_s`` has passed; ``NODES`` says which. The handle's stop() stops them all."""
    from mlrepro.slurm.launch import on_each

    out_dir = Path(out_dir)
    status = {name: "failed: its sampler said nothing" for name in names}
    record: dict[str, Any] = {"hosts": names, "job_id": job_id, "status": status}
    proc = None
    try:
        argv = [*on_each(job_id, names), sys.executable, "-P", "-m", "mlrepro.telemetry.sampler",
                "--out-dir", str(out_dir / NODES_DIR), "--host-dir", "--hz", str(hz), "--backend", backend,
                "--flush-every-s", str(flush_every_s)]
        record["command"] = argv
        with os.fdopen(untrusted_dir.open_append(out_dir, NODES_LOG), "ab") as log:  # no link followed
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                    env=sampler_env())
        assert proc.stdout is not None
        said = _announced(read_lines(proc.stdout, len(names), ready_timeout_s))
        proc.stdout.close()
        for name in names:
            if name in said:
                status[name] = said[name]
            elif proc.poll() is not None:
                status[name] = f"failed: srun exited with code {proc.returncode}: {log_tail(out_dir / NODES_LOG)}"
            else:
                status[name] = f"failed: its sampler was not ready after {ready_timeout_s:.0f} s"
    except Exception as e:
        for name in names:
            status[name] = f"failed: could not start the samplers: {type(e).__name__}: {e}"
    handle = SamplerHandle(out_dir / NODES_DIR, proc, "running" if proc is not None else "failed",
                           stop_signal=signal.SIGUSR1)  # srun forwards SIGUSR1 to its tasks; SIGTERM kills them
    _record(out_dir, record)
    return handle


def _record(out_dir: Path, record: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):  # without it the merge names no other node; their folders remain
        atomic.write_json(out_dir / NODES, record)


def start_for_run(out_dir: Path, env: Mapping[str, str], nodes: int, hz: float, backend: str = "nvml"
                  ) -> SamplerHandle | None:
    """The samplers of a run over ``nodes`` nodes inside a Slurm allocation, on every node of it but this one
    (whose sampler the driver starts); None for a run on one node or outside Slurm: nothing changes there."""
    from mlrepro.slurm import launch

    if nodes <= 1 or not launch.in_allocation(env):
        return None
    here = socket.gethostname()
    try:
        names = [h for h in launch.hosts(env) if h != here]
    except (launch.LaunchError, OSError, subprocess.SubprocessError) as e:
        _record(Path(out_dir), {"hosts": [], "error": f"the allocation's nodes are unknown: {e}"})
        return None
    return start_on_nodes(out_dir, env["SLURM_JOB_ID"], names, hz, backend) if names else None
