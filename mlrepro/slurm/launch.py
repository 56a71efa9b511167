"""One launcher for a run that spans processes: ``srun`` inside a Slurm allocation, ``torchrun`` elsewhere.

Either way every process learns its rank from its launcher's variables (:mod:`mlrepro.training.distributed`) and
meets the others at MASTER_ADDR:MASTER_PORT, which the launcher picks on the host it runs on: inside an
allocation that is the batch host, the first node of the job.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Mapping, Sequence


class LaunchError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def in_allocation(env: Mapping[str, str]) -> bool:
    return "SLURM_JOB_ID" in env and shutil.which("srun") is not None


def command(train_argv: Sequence[str], python: str, nodes: int, tasks_per_node: int, threads: int,
            env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command line that starts ``train_argv`` (``python -m ...`` or a script) as nodes x tasks_per_node processes,
    and the environment it needs added. One process: the command as it is."""
    argv = [python if train_argv[0] == "python" else train_argv[0], *train_argv[1:]]
    if nodes * tasks_per_node == 1:
        return argv, {}
    rendezvous = {"MASTER_ADDR": socket.gethostname(), "MASTER_PORT": str(free_port())}
    if in_allocation(env):
        srun = ["srun", f"--jobid={env['SLURM_JOB_ID']}", f"--nodes={nodes}", f"--ntasks={nodes * tasks_per_node}",
                f"--ntasks-per-node={tasks_per_node}", f"--cpus-per-task={threads}", "--kill-on-bad-exit=1",
                "--export=ALL"]
        return [*srun, *argv], rendezvous
    if nodes > 1:
        raise LaunchError(f"a run on {nodes} nodes needs a Slurm allocation (SLURM_JOB_ID is not set or srun "
                          "is missing); run it through `snakemake --profile profiles/slurm`")
    torchrun = [python, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={tasks_per_node}",
                f"--master-addr={rendezvous['MASTER_ADDR']}", f"--master-port={rendezvous['MASTER_PORT']}"]
    # A Python module runs as torchrun's own child; any other command (run_and_time.sh) as it is.
    target = ["-m", *argv[2:]] if argv[0] == python and argv[1:2] == ["-m"] else ["--no-python", *argv]
    return [*torchrun, *target], {}
