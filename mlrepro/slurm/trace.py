"""What a folder's run.sub executes on the cluster, found by running it with recording stand-ins.

The launch preview (``snakemake launch_preview``) runs the folder's own ``run.sub`` with bash, in the folder,
with the variables a run gives it (:func:`mlrepro.runs.runsub.environment`) and a Slurm allocation of the run's
shape described by its variables (SLURM_JOB_ID ``999999``, nodes ``node1..nodeN``). ``srun``, ``sbatch``,
``enroot``, ``sudo``, ``scontrol`` and ``sleep`` are stand-ins on PATH that record their argument list and
do nothing (``scontrol`` answers ``show hostnames`` and ``show job`` as Slurm would); so nothing runs on a node,
and every command the script would start there is listed in its order, each argument as bash passed it.
What the script runs itself (``mkdir``, ``tee`` of its log, ``date``) runs, in a private temporary folder that
is LOGDIR. The preview is a job (rules/preview.smk), never part of planning: run.sub is the submitter's code.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RECORDED = ("srun", "sbatch", "enroot", "sudo")  # the steps: what would run on the cluster
QUERIES = ("scontrol", "sleep")  # answered or skipped, recorded but not steps
JOB_ID = "999999"  # a number, as Slurm's are (run.sub files do arithmetic on it)
SEP = "\x1e"  # between one command's arguments and the next command (record separator)

_STANDIN = r"""#!/bin/sh
# mlrepro launch preview: records this command and does nothing
{ printf '%s\037' "${0##*/}" "$@"; printf '\036'; } >> "$MLREPRO_TRACE_FILE"
case "${0##*/} $1 $2" in
  "scontrol show hostnames") printf '%s\n' $MLREPRO_TRACE_HOSTS ;;
  "scontrol show job") echo "JobId=$3 JobName=run.sub"; echo "   Command=$MLREPRO_TRACE_COMMAND" ;;
esac
exit 0
"""


@dataclass(frozen=True)
class Trace:
    steps: list[list[str]]  # srun/sbatch/enroot/sudo argument lists in their order
    commands: list[list[str]] = field(default_factory=list)  # every recorded command, queries included
    exit_code: int = 0
    stderr_tail: str = ""


def hosts(nodes: int) -> list[str]:
    return [f"node{i}" for i in range(1, nodes + 1)]


def allocation_env(nodes: int, gpus_per_node: int, job_id: str = JOB_ID) -> dict[str, str]:
    """What Slurm sets in a batch job of ``nodes`` nodes (the variables run.sub files read)."""
    names = hosts(nodes)
    node_list = names[0] if nodes == 1 else f"node[1-{nodes}]"
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NUM_NODES": str(nodes),
           "SLURM_NNODES": str(nodes), "SLURM_JOB_NODELIST": node_list, "SLURM_NODELIST": node_list}
    if gpus_per_node:
        env["SLURM_GPUS_ON_NODE"] = str(gpus_per_node)
    return env


def trace(run_sub: Path, env: dict[str, str], nodes: int, gpus_per_node: int, timeout_s: float = 120) -> Trace:
    """Run ``run_sub`` with the stand-ins; its steps. ``env`` is what a run gives it (LOGDIR is replaced by a
    private temporary folder, which is removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="mlrepro-preview-") as tmp:
        bin_dir = Path(tmp) / "bin"
        bin_dir.mkdir()
        for name in (*RECORDED, *QUERIES):
            path = bin_dir / name
            path.write_text(_STANDIN, encoding="utf-8")
            path.chmod(0o700)
        record = Path(tmp) / "trace"
        record.touch()
        logdir = Path(tmp) / "logs"
        logdir.mkdir()
        full = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": tmp, "LANG": "C.UTF-8",
            **allocation_env(nodes, gpus_per_node), **env,
            "LOGDIR": str(logdir),
            "MLREPRO_TRACE_FILE": str(record), "MLREPRO_TRACE_HOSTS": " ".join(hosts(nodes)),
            "MLREPRO_TRACE_COMMAND": str(run_sub),
        }
        proc = subprocess.run(["bash", str(run_sub)], cwd=run_sub.parent, env=full, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout_s, check=False)
        commands = parse(record.read_bytes().decode("utf-8", errors="replace"), str(logdir), env.get("LOGDIR"))
    # run.sub's own error (an unbound variable) is on stderr; a step's, piped through tee, on stdout
    output = proc.stderr.decode(errors="replace") + proc.stdout.decode(errors="replace")
    steps = [c for c in commands if c[0] in RECORDED]
    return Trace(steps, commands, proc.returncode, "\n".join(output.splitlines()[-20:]))


def parse(text: str, private_logdir: str, logdir: str | None) -> list[list[str]]:
    """The recorded commands; the private LOGDIR is shown as the run's (``logdir``) where the preview names one."""
    commands = []
    for item in text.split(SEP):
        if not item:
            continue
        argv = item.split("\x1f")[:-1]
        if logdir:
            argv = [a.replace(private_logdir, logdir) for a in argv]
        commands.append(argv)
    return commands


_SHORT = {"-N": "--nodes", "-n": "--ntasks", "-t": "--time", "-c": "--cpus-per-task", "-w": "--nodelist"}
_FLAGS = {"-l": "--label"}
_TAKES = {"--nodes", "--ntasks", "--time", "--ntasks-per-node", "--mpi", "--container-name", "--container-image",
          "--container-mounts", "--container-workdir", "--container-env", "--cpus-per-task", "--jobid",
          "--nodelist", "--export", "--cpu-bind", "--gpus-per-node", "--output", "--error", "--job-name"}


def split(step: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """An srun command's options (``--ntasks=8``, ``--ntasks 8``, ``-N1``, ``-n 1``; short ones by their long
    names) and the command it starts (the words after them)."""
    found: dict[str, str | bool] = {}
    i = 1
    while i < len(step) and step[i].startswith("-"):
        word = step[i]
        if word in _FLAGS:
            found[_FLAGS[word]] = True
        elif not word.startswith("--") and word[:2] in _SHORT:
            if len(word) > 2:
                found[_SHORT[word[:2]]] = word[2:]
            else:
                i += 1
                found[_SHORT[word]] = step[i] if i < len(step) else ""
        elif "=" in word:
            name, value = word.split("=", 1)
            found[name] = value
        elif word in _TAKES:
            i += 1
            found[word] = step[i] if i < len(step) else ""
        else:
            found[word] = True
        i += 1
    return found, step[i:]


def summarize(trace_: Trace) -> dict[str, Any]:
    """The training step (the srun that starts run_and_time.sh) and the cache clearing, as the preview lists them."""
    training = next((s for s in trace_.steps if s[0] == "srun" and any("run_and_time" in w for w in split(s)[1])),
                    None)
    clears = [s for s in trace_.steps if s[0] == "srun" and any("drop_caches" in w for w in s)]
    logs_clear = [s for s in trace_.steps if s[0] == "srun" and any("CACHE_CLEAR" in w for w in s)]
    found: dict[str, Any] = {"cache_clear": bool(clears), "cache_clear_logged": bool(logs_clear)}
    if training is not None:
        opts, command = split(training)
        mounts = str(opts.get("--container-mounts", ""))
        found["training"] = {
            "ntasks": opts.get("--ntasks"), "ntasks_per_node": opts.get("--ntasks-per-node"),
            "mpi": opts.get("--mpi"), "workdir": opts.get("--container-workdir"),
            "mounts": [m.split(":")[1] for m in mounts.split(",") if m.count(":") >= 1],
            "command": command,
        }
    return found

