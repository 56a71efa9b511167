"""One launcher for a run that spans processes: ``srun`` inside a Slurm allocation, ``torchrun`` elsewhere.

Either way every process learns its rank from its launcher's variables (:mod:`mlrepro.training.distributed`) and
meets the others at MASTER_ADDR:MASTER_PORT. Inside an allocation that is the first host of the job's node list
(``scontrol show hostnames``), where Slurm places rank 0 and where the run's batch script, and so this launcher,
runs; its port is one free there. One ``srun`` starts the ranks on every node of the allocation, natively or in
the run's container (pyxis/enroot or apptainer, :mod:`mlrepro.slurm.containers`), as NVIDIA's run.sub does; with
``--kill-on-bad-exit`` a rank that fails ends the others, and srun names its node (:func:`failed_tasks`).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlrepro.core.errors import MlreproError
from mlrepro.engines import Mount
from mlrepro.slurm import containers
from mlrepro.slurm.jobs import this_job

# What each node runs before the ranks when the config asks for cold caches (run.sub: `sync && sysctl
# vm.drop_caches=3` on every node). Only root may; a node where it may not says so in the run's log.
DROP_CACHES = ('if sync && echo 3 > /proc/sys/vm/drop_caches; then echo "drop_caches: cleared on $(hostname)"; '
               'else echo "drop_caches: not cleared on $(hostname) (only root may)"; fi')
# srun's own line for a task that failed, e.g. "srun: error: node2: task 1: Exited with exit code 3"
SRUN_TASK_ERROR = re.compile(r"^srun: error: (\S+): tasks? ([0-9,\-]+): (.+)$", re.MULTILINE)


class LaunchError(MlreproError, RuntimeError):
    pass


@dataclass(frozen=True)
class Container:
    """The run's image and how it runs on Slurm: engine enroot (pyxis) or apptainer."""
    engine: str
    image: str  # enroot: a .sqsh file or registry ref; apptainer: a .sif file
    name: str  # pyxis' container name, shared by the import and the run
    mounts: Sequence[Mount]
    gpus: bool
    workdir: str | None = None


@dataclass(frozen=True)
class Launch:
    """What the driver runs for one run: set-up commands (each must succeed), then the run's command."""
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the run's environment (the rendezvous)
    setup: list[list[str]] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def in_allocation(env: Mapping[str, str]) -> bool:
    return "SLURM_JOB_ID" in env and shutil.which("srun") is not None


def hosts(env: Mapping[str, str]) -> list[str]:
    """The host names of the job's node list, in Slurm's order (rank 0's first: Slurm places tasks block by
    block)."""
    job = this_job(env)
    assert job is not None
    proc = subprocess.run(["scontrol", "show", "hostnames", job["node_list"]], capture_output=True, text=True,
                          timeout=30, check=False)
    names = proc.stdout.split()
    if proc.returncode != 0 or not names:
        raise LaunchError(f"Slurm job {job['job_id']}: `scontrol show hostnames {job['node_list']}` gave no host "
                          f"({proc.stderr.strip()[:200]})")
    return names


def allocation_env(env: Mapping[str, str]) -> dict[str, str]:
    """The allocation's own variables that a batch script reads (SLURM_JOB_NUM_NODES, SLURM_JOB_NODELIST, ...) and
    that Snakemake's jobstep plugin removes from the job's environment (it keeps SLURM_JOB_ID): from the controller."""
    job_id = env["SLURM_JOB_ID"]
    fields = _job_fields(job_id)
    found = {"SLURM_JOBID": job_id, "SLURM_JOB_NODELIST": fields["NodeList"], "SLURM_NODELIST": fields["NodeList"],
             "SLURM_JOB_NUM_NODES": fields.get("NumNodes", "1").split("-")[0],
             "SLURM_NNODES": fields.get("NumNodes", "1").split("-")[0]}
    if fields.get("Partition"):
        found["SLURM_JOB_PARTITION"] = fields["Partition"]
    return {**found, **{k: v for k, v in env.items() if k in found}}


def _job_fields(job_id: str) -> dict[str, str]:
    """``scontrol show job`` of ``job_id``, its KEY=VALUE words (one line each: ``-o``)."""
    proc = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30,
                          check=False)
    fields = dict(w.split("=", 1) for w in proc.stdout.split() if "=" in w)
    if proc.returncode != 0 or "NodeList" not in fields:
        raise LaunchError(f"Slurm job {job_id}: `scontrol show job -o {job_id}` named no node list "
                          f"({proc.stderr.strip()[:200]})")
    return fields


def batch_env(env: Mapping[str, str], folder: Path) -> dict[str, str]:
    """The variables Slurm gives a batch script that the job's own environment lacks (Snakemake's jobstep plugin
    keeps only SLURM_JOB_ID, SLURM_SUBMIT_DIR, SLURM_SUBMIT_HOST and SLURM_CLUSTER_NAME), for a script submitted from
    ``folder`` as NVIDIA's READMEs submit run.sub (``cd <folder>; sbatch -N ... run.sub``): the allocation's
    (:func:`allocation_env`), the job's name, account and QoS, the batch task's own ids (node 0, task 0) and
    SLURM_SUBMIT_DIR, the folder."""
    fields = _job_fields(env["SLURM_JOB_ID"])
    found = {"SLURM_SUBMIT_DIR": str(folder), "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
             "SLURM_GTIDS": "0", **{var: fields[key] for key, var in
                                    (("JobName", "SLURM_JOB_NAME"), ("Account", "SLURM_JOB_ACCOUNT"),
                                     ("QOS", "SLURM_JOB_QOS")) if fields.get(key) not in (None, "(null)")}}
    return {**allocation_env(env), **found}


def script_folder(env: Mapping[str, str], cwd: Path) -> Path:
    """The folder a batch script finds itself in through Slurm, as v4.1's run.sub files do (``RUNSUB_DIR=$(dirname
    $(scontrol show job $SLURM_JOB_ID | awk -F= '/Command=/{print $2}'))``), resolved from ``cwd`` where it runs.
    Under Snakemake's executor the job's script is its ``--wrap`` command, which Slurm names ``(null)``: ``.``, the
    folder the script runs in."""
    command = _job_fields(env["SLURM_JOB_ID"]).get("Command", "")
    return (cwd / os.path.dirname(command)).resolve()


def first_host(env: Mapping[str, str]) -> str:
    """The first host of the job's node list, where rank 0 runs."""
    return hosts(env)[0]


def on_each(job_id: str, names: Sequence[str]) -> list[str]:
    """``srun`` of one task on each of ``names`` (nodes of the allocation) beside the run's own steps: --overlap
    shares the CPUs and memory the ranks hold; a task that fails ends no other (the telemetry samplers)."""
    return ["srun", f"--jobid={job_id}", f"--nodes={len(names)}", f"--ntasks={len(names)}", "--ntasks-per-node=1",
            f"--nodelist={','.join(names)}", "--overlap", "--kill-on-bad-exit=0", "--export=ALL"]


def srun(job_id: str, nodes: int, tasks_per_node: int, threads: int | None = None) -> list[str]:
    """``srun`` of tasks_per_node tasks on each of the allocation's nodes."""
    return ["srun", f"--jobid={job_id}", f"--nodes={nodes}", f"--ntasks={nodes * tasks_per_node}",
            f"--ntasks-per-node={tasks_per_node}", *([f"--cpus-per-task={threads}"] if threads else []),
            "--kill-on-bad-exit=1", "--export=ALL"]


def command(train_argv: Sequence[str], python: str, nodes: int, tasks_per_node: int, threads: int,
            env: Mapping[str, str], container: Container | None = None, drop_caches: bool = False) -> Launch:
    """How to start ``train_argv`` (``python -m ...`` or a script) as nodes x tasks_per_node processes. One native
    process: the command as it is (its engine runs it)."""
    argv = [python if train_argv[0] == "python" else train_argv[0], *train_argv[1:]]
    if nodes * tasks_per_node == 1:
        return Launch(argv)
    if in_allocation(env):
        job_id = env["SLURM_JOB_ID"]
        rendezvous = {"MASTER_ADDR": first_host(env), "MASTER_PORT": str(free_port())}
        per_node = srun(job_id, nodes, 1)
        setup = [[*per_node, "sh", "-c", DROP_CACHES]] if drop_caches else []
        ranks = srun(job_id, nodes, tasks_per_node, threads)
        if container is None:
            return Launch([*ranks, *argv], rendezvous, setup)
        argv = list(train_argv)  # `python` is the image's
        if container.engine == "enroot":
            try:
                containers.require_pyxis()
            except containers.PluginMissing as e:
                raise LaunchError(str(e)) from None
            setup.append(containers.pyxis_import(per_node, container.image, container.name))
            return Launch(containers.pyxis_run(ranks, container.name, container.mounts, container.workdir, argv),
                          rendezvous, setup)
        if container.engine == "apptainer":
            return Launch(containers.apptainer_run(ranks, container.image, container.mounts, container.gpus,
                                                   container.workdir, argv), rendezvous, setup)
        raise LaunchError(f"a run of {nodes} x {tasks_per_node} processes: {containers.one_process(container.engine)}")
    if container is not None or nodes > 1:
        what = f"a run on {nodes} nodes" if nodes > 1 else f"a run of {tasks_per_node} processes in a container"
        raise LaunchError(f"{what} needs a Slurm allocation (SLURM_JOB_ID is not set or srun is missing); run it "
                          "through `snakemake --profile profiles/slurm`")
    free = {"MASTER_ADDR": socket.gethostname(), "MASTER_PORT": str(free_port())}
    torchrun = [python, "-P", "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={tasks_per_node}",
                f"--master-addr={free['MASTER_ADDR']}", f"--master-port={free['MASTER_PORT']}"]
    # A Python module runs as torchrun's own child; any other command (run_and_time.sh) as it is.
    target = ["-m", *argv[2:]] if argv[0] == python and argv[1:2] == ["-m"] else ["--no-python", *argv]
    return Launch([*torchrun, *target])


def failed_tasks(log: str) -> list[str]:
    """srun's word on the tasks that failed ("task 1 on node2: Exited with exit code 3"), first ones first; each
    shortened (the log is the run's own output, which may write anything)."""
    return [f"task {tasks[:40]} on {node[:100]}: {why.strip()[:200]}" for node, tasks, why in
            SRUN_TASK_ERROR.findall(log)]

