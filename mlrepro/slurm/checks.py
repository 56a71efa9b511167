"""Before anything is submitted: Slurm's commands, its controller, the partition and the job shapes.

Each problem is one line naming what is wrong and what to do; the pipeline stops before its first job.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from mlrepro.core.errors import MlreproError
from mlrepro.slurm import containers
from mlrepro.slurm.resources import JobShape, walltime_minutes

COMMANDS = ("sbatch", "srun", "squeue", "sacct", "scontrol", "sinfo")


class PreflightError(MlreproError, RuntimeError):
    pass


Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)


def fields(line: str) -> dict[str, str]:
    """``scontrol show ... -o``: Key=Value words on one line."""
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def _limit(value: str | None) -> int | None:
    return None if value in (None, "", "UNLIMITED", "NONE", "N/A") else int(str(value).split("(")[0])


def _minutes(value: str | None) -> int | None:
    return None if value in (None, "", "UNLIMITED", "NONE", "INFINITE") else walltime_minutes(str(value))


def check(shapes: Mapping[str, JobShape], partition: str | None, threads: int, run: Runner = _run,
          which: Callable[[str], str | None] = shutil.which, engine: str = "native") -> None:
    """Raise PreflightError (one line) unless every shape fits the partition of a controller that answers, and
    the engine can start a run of several processes where a shape has them."""
    missing = [c for c in COMMANDS if which(c) is None]
    if missing:
        raise PreflightError(f"Slurm: {', '.join(missing)} not found on PATH; install Slurm's client tools "
                             "(Debian: slurm-client) or run without --profile profiles/slurm")
    try:
        ping = run(["scontrol", "ping"])
    except subprocess.TimeoutExpired:
        raise PreflightError("Slurm: `scontrol ping` did not answer in 20 s; is slurmctld running "
                             "(SLURM_CONF, .ci/slurm.sh start)?") from None
    if ping.returncode != 0 or "UP" not in ping.stdout:
        raise PreflightError(f"Slurm: the controller does not answer (`scontrol ping`: "
                             f"{(ping.stdout + ping.stderr).strip()[:200]!r}); is slurmctld running?")
    if partition:
        proc = run(["scontrol", "show", "partition", partition, "-o"])
        if proc.returncode != 0 or not proc.stdout.strip():
            names = run(["sinfo", "-h", "-o", "%R"]).stdout.split()
            raise PreflightError(f"Slurm: partition {partition!r} (config slurm.partition) does not exist; "
                                 f"this cluster has: {', '.join(sorted(set(names))) or 'none'}")
    else:
        proc = run(["scontrol", "show", "partition", "-o"])
        defaults = [ln for ln in proc.stdout.splitlines() if "Default=YES" in ln]
        if not defaults:
            raise PreflightError("Slurm: no default partition; set slurm.partition in the config")
        proc.stdout = defaults[0]
    part = fields(proc.stdout.splitlines()[0])
    name = part.get("PartitionName", partition or "?")
    nodes = run(["scontrol", "show", "node", part.get("Nodes", ""), "-o"]).stdout.splitlines()
    cpus = max((int(fields(n).get("CPUTot", 0)) for n in nodes), default=0)
    gpus = max((_gpus(fields(n).get("Gres", "")) for n in nodes), default=0)
    total_nodes = _limit(part.get("TotalNodes"))
    max_nodes = _limit(part.get("MaxNodes"))
    max_minutes = _minutes(part.get("MaxTime"))
    for bm, shape in shapes.items():
        problem = None
        if total_nodes is not None and shape.nodes > total_nodes:
            problem = f"{shape.nodes} nodes, partition {name} has {total_nodes}"
        elif max_nodes is not None and shape.nodes > max_nodes:
            problem = f"{shape.nodes} nodes, partition {name} allows {max_nodes} per job"
        elif shape.tasks_per_node * threads > cpus:
            problem = (f"{shape.tasks_per_node} processes x {threads} threads per node, the nodes of partition "
                       f"{name} have {cpus} CPUs")
        elif shape.gpus_per_node > gpus:
            problem = f"{shape.gpus_per_node} GPUs per node, the nodes of partition {name} have {gpus}"
        elif max_minutes is not None and shape.minutes > max_minutes:
            problem = f"walltime {shape.walltime}, partition {name} allows {part.get('MaxTime')}"
        if problem:
            raise PreflightError(f"Slurm: job shape of {bm} (config job_shapes, systems.<name>.nodes or the "
                                 f"config file) too large: {problem}")
    several = sorted(bm for bm, shape in shapes.items() if shape.processes > 1)
    if several and engine not in ("native", "enroot", "apptainer"):
        raise PreflightError(f"Slurm: {', '.join(several)} run several processes (job shape) and "
                             f"{containers.one_process(engine)}")
    if several and engine == "enroot":
        try:
            containers.require_pyxis(run)
        except containers.PluginMissing as e:
            raise PreflightError(str(e)) from None


def _gpus(gres: str) -> int:
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def preflight(config: Mapping[str, Any], shapes: Mapping[str, JobShape]) -> None:
    """``shapes``: each run's shape by what it runs (``<system>/<benchmark>``)."""
    check(shapes, config.get("slurm", {}).get("partition"), int(config.get("threads_per_run", 1)),
          engine=str(config.get("engine", "native")))

