"""A run's job shape (nodes, processes and GPUs per node, walltime) and the Slurm resources that ask for it.

The shape comes from the configuration (``job_shapes: {<benchmark>: ...}``) or, for a vendor implementation,
from its ``config_*.sh`` (DGXNNODES, DGXNGPU, WALLTIME: :func:`shape_from_config_sh`). The resources are the
names Snakemake's Slurm executor plugin reads (nodes, tasks, cpus_per_task, mem_mb, runtime, gres,
slurm_partition, slurm_account, qos, constraint, slurm_extra); other executors ignore them. A run of more than
one process is an ``mpi`` job to the plugin: its command runs once in the allocation, and our launcher starts
the processes with ``srun``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mlrepro.core.errors import MlreproError
from mlrepro.core.smk import signature_once

WALLTIME = re.compile(r"^(?:(\d+)-)?(\d{1,2}):(\d{2})(?::(\d{2}))?$")


class ShapeError(MlreproError, ValueError):
    pass


@dataclass(frozen=True)
class JobShape:
    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    walltime: str = "00:30:00"  # Slurm's [D-]HH:MM[:SS]
    mem_mb: int | None = None  # per node; None: the configured slurm.mem_mb
    run_sub: bool = False  # the folder's own run.sub runs in the allocation (mlrepro/runs/runsub.py)
    sbatch: tuple[str, ...] = ()  # run.sub's #SBATCH options the allocation keeps (--exclusive; --mem=0 is dropped)

    @property
    def processes(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def minutes(self) -> int:
        return walltime_minutes(self.walltime)


def walltime_minutes(walltime: str) -> int:
    m = WALLTIME.match(walltime.strip())
    if not m:
        raise ShapeError(f"walltime {walltime!r}: expected [D-]HH:MM[:SS], as Slurm and config_*.sh write it")
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return max(1, days * 1440 + hours * 60 + minutes + (1 if seconds else 0))


def shape_from_config_sh(env: Mapping[str, str]) -> JobShape:
    """NVIDIA's convention: config_DGXA100_8x8x56.sh exports DGXNNODES, DGXNGPU (GPUs and so processes per
    node) and WALLTIME (minutes, or HH:MM:SS)."""
    try:
        nodes, gpus = int(env.get("DGXNNODES", 1)), int(env.get("DGXNGPU", 0))
    except ValueError as e:
        raise ShapeError(f"DGXNNODES/DGXNGPU must be integers: {e}") from None
    if nodes < 1 or gpus < 0:
        raise ShapeError(f"DGXNNODES={nodes}, DGXNGPU={gpus}: a run needs at least one node (DGXNNODES >= 1) and "
                         "no negative GPU count, as systems.<name>.nodes and job_shapes require")
    wall = str(env.get("WALLTIME", "30"))
    walltime = f"{int(wall) // 60:02d}:{int(wall) % 60:02d}:00" if wall.isdigit() else wall
    walltime_minutes(walltime)
    return JobShape(nodes=nodes, tasks_per_node=max(1, gpus), gpus_per_node=gpus, walltime=walltime)


def unit_shape(env: Mapping[str, str], configured: JobShape | None, nodes: int | None,
               sbatch: tuple[str, ...] | None) -> JobShape:
    """The shape of a (system, benchmark)'s runs: ``configured`` (job_shapes), else its config file's variables
    ``env``; the system's ``nodes`` where it has them; a folder with run.sub: the #SBATCH options it keeps."""
    shape = configured or shape_from_config_sh(env)
    shape = dataclasses.replace(shape, nodes=nodes) if nodes else shape
    return dataclasses.replace(shape, run_sub=True, sbatch=sbatch) if sbatch is not None else shape


def shape_for(config: Mapping[str, Any], benchmark: str) -> JobShape:
    """The benchmark's configured shape (job_shapes.<benchmark>), defaults for what it leaves out."""
    raw = dict(config.get("job_shapes", {}).get(benchmark) or {})
    shape = JobShape(**raw)
    walltime_minutes(shape.walltime)
    return shape


def slurm_resources(shape: JobShape, config: Mapping[str, Any], threads: int) -> dict[str, Any]:
    """The executor plugin's resources for one run of ``shape``; keys without a value are left out."""
    slurm = config.get("slurm", {})
    if shape.run_sub:
        return {k: v for k, v in run_sub_resources(shape, slurm).items() if v is not None}
    res: dict[str, Any] = {
        "nodes": shape.nodes,
        "tasks": shape.processes,
        "cpus_per_task": threads,
        "mem_mb": shape.mem_mb or slurm.get("mem_mb", 4000),
        "runtime": shape.minutes,
        "slurm_partition": slurm.get("partition"),
        "slurm_account": slurm.get("account"),
        "qos": slurm.get("qos"),
        "constraint": slurm.get("constraint"),
        # Timed runs own their nodes: another job's load would change the time to train.
        "slurm_extra": "--exclusive" if slurm.get("exclusive", True) else None,
    }
    if shape.processes > 1:
        res["mpi"] = "srun"  # the plugin then runs our command once; the launcher's srun starts the ranks
    if shape.gpus_per_node:
        res["gres"] = f"gpu:{shape.gpus_per_node}"
        res["tasks_per_gpu"] = 1
    return {k: v for k, v in res.items() if v is not None}


def run_sub_resources(shape: JobShape, slurm: Mapping[str, Any]) -> dict[str, Any]:
    """The allocation of one experiment of a folder's run.sub, as its README submits it (``sbatch -N DGXNNODES
    -t WALLTIME run.sub``, with run.sub's ``#SBATCH`` lines) and with the node's GPUs: run.sub's own srun steps then
    share it out. ``mpi`` makes the plugin run the driver once in the batch step (not in an srun step of its own,
    which would hold the CPUs that run.sub's steps need); the plugin asks more than one task of an mpi job, and
    run.sub sets every step's own task count, so ``tasks`` is only the allocation's count. No --cpus-per-task
    (cpus_per_task -1) and no --mem: run.sub's --mem=0 cannot be asked, as Snakemake's Slurm executor plugin
    (2.8.0) refuses any --mem in slurm_extra and passes --mem only for a mem_mb that is not 0; without --mem Slurm
    gives the job its DefMemPerNode (unlimited by default: the whole node, as --mem=0), and --exclusive (run.sub's
    or slurm.exclusive) gives it the whole node otherwise."""
    extra = [w for w in shape.sbatch if not w.startswith("--mem")]
    if slurm.get("exclusive", True) and "--exclusive" not in extra:
        extra.append("--exclusive")
    return {
        "nodes": shape.nodes, "tasks": max(2, shape.nodes * max(1, shape.gpus_per_node)), "cpus_per_task": -1,
        "mem_mb": 0, "runtime": shape.minutes, "mpi": "srun",
        "gres": f"gpu:{shape.gpus_per_node}" if shape.gpus_per_node else None, "tasks_per_gpu": 0,
        "slurm_partition": slurm.get("partition"), "slurm_account": slurm.get("account"), "qos": slurm.get("qos"),
        "constraint": slurm.get("constraint"), "slurm_extra": " ".join(extra),
    }


RESOURCE_NAMES = ("nodes", "tasks", "cpus_per_task", "mem_mb", "runtime", "slurm_partition", "slurm_account",
                  "qos", "constraint", "slurm_extra", "mpi", "gres", "tasks_per_gpu")


def _unit(wildcards: Any) -> tuple[str, str]:
    return wildcards.system, wildcards.benchmark


# What a config file's variables give (DGXNNODES, DGXNGPU, WALLTIME); the others: the config's and the folder's
FROM_CONFIG_FILE = ("nodes", "tasks", "runtime", "mpi", "gres", "tasks_per_gpu")


def run_resources(config: Mapping[str, Any], threads: int, units: Iterable[Any], shape: Callable[[Any], JobShape],
                  key: Callable[[Any], Any] = _unit,
                  stand_in: Callable[[Any], JobShape] | None = None) -> dict[str, Any]:
    """The run rule's ``resources:`` for runs of ``units`` (``shape(unit)``: its shape; ``key(wildcards)``: a run's
    unit; the pipeline's: (system, benchmark)): a value where every run has the same, else a callable of the run's
    wildcards (Snakemake calls each per job: a thousand runs of ten systems would pay for thirteen calls each); a name
    no run has is left out. Where a shape is not known yet (FileNotFoundError: its config file's capture job has not
    run), the names a config file gives are callables that raise it too: Snakemake shows ``<TBD>`` while it builds the
    DAG and asks again before the job runs, once the job it waits for has written the file; the others come from
    ``stand_in(unit)`` (the shape without its config file's variables), or are callables too without one."""
    units = list(units)
    try:
        per_unit, lazy = {unit: slurm_resources(shape(unit), config, threads) for unit in units}, ()
    except FileNotFoundError:
        per_unit = {unit: slurm_resources(stand_in(unit), config, threads) for unit in units} if stand_in else {}
        lazy = FROM_CONFIG_FILE if stand_in else RESOURCE_NAMES
    resources = _lazy_resources(config, threads, shape, key, lazy)
    for name in RESOURCE_NAMES:
        if name in lazy:
            continue
        values = {unit: res.get(name) for unit, res in per_unit.items()}
        distinct = set(values.values())
        if len(distinct) > 1:
            resources[name] = lambda w, values=values: values[key(w)]
        elif distinct and None not in distinct:
            resources[name] = distinct.pop()
    return resources


def _lazy_resources(config: Mapping[str, Any], threads: int, shape: Callable[[Any], JobShape],
                    key: Callable[[Any], Any], names: tuple[str, ...]) -> dict[str, Any]:
    known: dict[Any, dict[str, Any]] = {}

    def value(w: Any, name: str) -> Any:
        unit = key(w)
        if unit not in known:
            known[unit] = slurm_resources(shape(unit), config, threads)
        return known[unit].get(name)  # None: the name is not this run's (Snakemake leaves it out)

    return {name: signature_once(lambda w, name=name: value(w, name)) for name in names}
