"""What a folder's run.sub executes, found by running it in a private sandbox as the first node of its allocation.

The launch preview (``snakemake launch_preview``) and the capture job (what a folder needs:
mlrepro/runs/demands.py) run the folder's own ``run.sub`` with bash, with the variables a run gives it
(:func:`mlrepro.runs.runsub.environment`) and the environment Slurm gives a batch script of the run's allocation
(SLURM_JOB_ID ``999999``, nodes ``node1..nodeN``, SLURM_SUBMIT_DIR its folder). Nothing of it runs on a node and
nothing of the host's cluster tools runs at all:

- it runs in a fresh private folder (a copy of its implementation folder, so that what it sources beside itself,
  through ``scontrol show job``'s ``Command=`` too, is there), its LOGDIR and HOME private folders beside it;
- ``PATH`` is fixed: the stand-ins first, then shims of a few host tools; a PATH the config file, the config's
  ``env`` or run.sub itself sets is replaced before each command run.sub runs (bash's DEBUG trap, installed through
  ``BASH_ENV`` before run.sub's first line);
- stand-ins answer as an allocated GPU node of the configured system would (:class:`Node`: GPU count and model,
  architecture, the allocation's node list) for the tools a run.sub calls outside srun (``nvidia-smi``, ``ibstat``,
  ``numactl``, ``lscpu``, ``hostname -i``, ``scontrol``, ``sinfo``, ``squeue``...); ``srun``, ``sbatch``,
  ``enroot``, ``docker``, ``sudo``... record their argument list and do nothing: they are the run's steps;
- host tools that compute values (``mkdir``, ``tee``, ``date``, ``sed``, ``jq``...) run, through shims that record
  them; those that change files do so only inside the private folder (elsewhere they are recorded as outside);
- a command it calls that is neither (a site tool) is recorded with its file and line, "would run on the first
  node", and answers nothing with status 0 (bash's ``command_not_found_handle``); a cluster tool it calls by its
  path (``/usr/bin/srun``) is not run: run.sub stops there, and the preview names the line;
- every simple command it executes is recorded with its file and line (the DEBUG trap): the path it took;
- at the end every process it started is killed: its own session's process group, then any process still
  carrying the sandbox's marker in its environment.

Its errors (bash's ``unbound variable``, ``${X:?}``) are parsed with their file and line. The preview is a job
(rules/preview.smk), as is the capture (rules/runs.smk): run.sub is the submitter's code, never run while planning.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# what would run on the cluster: the preview's steps, in their order
RECORDED = ("srun", "sbatch", "salloc", "enroot", "sudo", "docker", "podman", "apptainer", "singularity")
# answered as an allocated node would (or skipped: sleep, pkill), recorded, not steps
QUERIES = ("scontrol", "sinfo", "squeue", "sacct", "nvidia-smi", "ibstat", "ibstatus", "ibv_devinfo", "numactl",
           "lscpu", "nproc", "hostname", "uname", "sleep", "pkill", "killall", "dcgmi")
# host tools run here (in the private folder): they compute the values run.sub uses
LOCAL = ("awk", "gawk", "mawk", "basename", "bash", "base64", "bc", "cat", "column", "cut", "date", "dirname", "echo",
         "egrep", "env", "envsubst", "expr", "false", "fgrep", "find", "getent", "grep", "head", "id", "jq", "ls",
         "md5sum", "mktemp", "numfmt", "paste", "printf", "ps", "python", "python3", "readlink", "realpath", "sed",
         "seq", "sh", "sha256sum", "sort", "stat", "sync", "tac", "tail", "test", "timeout", "tr", "true", "uniq",
         "wc", "whoami", "xargs")
# host tools that change files: run only where every path they name is inside the private folder
GUARDED = ("chmod", "cp", "install", "ln", "mkdir", "mv", "rm", "rmdir", "tee", "touch")
HOST_PATH = "/usr/local/bin:/usr/bin:/bin"
JOB_ID = "999999"  # a number, as Slurm's are (run.sub files do arithmetic on it)
SEP, UNIT = "\x1e", "\x1f"  # between records, between a record's fields
FIRST_NODE = "would run on the first node"
TIMED_OUT = -int(signal.SIGKILL)  # the exit code of a run.sub the tracer stopped
# names a tracer's environment never takes from a config: they would run code or remove the sandbox
RESERVED = re.compile(r"^(BASH_ENV|ENV|PATH|SHELLOPTS|BASHOPTS|PS4|IFS|CDPATH|GLOBIGNORE|LD_\w*|MLREPRO_TRACE\w*)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# bash's error for a parameter: "<file>: line <n>: <name>: <message>" (unbound variable, ${X:?message})
_ERROR = re.compile(r"^(.+?): line (\d+): ([A-Za-z_][A-Za-z0-9_]*): (.+)$", re.MULTILINE)

# Sourced by bash (BASH_ENV) before run.sub's first line, and by every bash it starts: the DEBUG trap that records
# each command with its file and line, re-asserts PATH and exports the command's place for the stand-ins; the handler
# of commands that are nowhere. Both silent under run.sub's own `set -x`, and never stopped by its `set -u`.
_SETUP = r"""set -T
PS4='+ '
__mlrepro_dbg() {
  [[ ${BASH_SOURCE[1]-} == "$MLREPRO_TRACE_SETUP" ]] && return 0
  [[ $PATH == "$MLREPRO_TRACE_PATH" ]] || PATH=$MLREPRO_TRACE_PATH
  export MLREPRO_TRACE_AT="${BASH_SOURCE[1]-}:${1-}"
  builtin printf 'X\037%s\037%s\036' "$MLREPRO_TRACE_AT" "$BASH_COMMAND" >> "$MLREPRO_TRACE_FILE"
  local w=${BASH_COMMAND%%[[:space:]]*}
  if [[ $w == */* && " ${MLREPRO_TRACE_BLOCK-} " == *" ${w##*/} "* ]]; then  # a cluster tool by its path: not run
    builtin printf 'B\037%s\037%s\037\036' "$MLREPRO_TRACE_AT" "$BASH_COMMAND" >> "$MLREPRO_TRACE_FILE"
    builtin exit 97
  fi
}
command_not_found_handle() {
  { local r; builtin printf -v r '%s\037' "U" "${BASH_SOURCE[1]-}:${BASH_LINENO[0]-}" "$@"
    builtin printf '%s\036' "$r" >> "$MLREPRO_TRACE_FILE"; } 2>/dev/null
  return 0
}
trap '{ __mlrepro_dbg "$LINENO"; } 2>/dev/null' DEBUG
"""

# How the stand-ins and shims record a command: a tag, where run.sub ran it, its argument list (one write: the
# commands of a pipeline record at the same time).
_REC = r"""rec() {
  r=$(printf '%s\037%s\037' "$1" "${MLREPRO_TRACE_AT:-}"); shift
  for a in "$@"; do r=$r$(printf '%s\037' "$a"); done
  printf '%s\036' "$r" >> "$MLREPRO_TRACE_FILE"
}"""

# The stand-ins: one POSIX sh script (sh reads no BASH_ENV) answering by the name it is called by.
_STANDIN = r"""#!/bin/sh
me=${0##*/}
{REC}
rec S "$me" "$@"
PATH=/usr/local/bin:/usr/bin:/bin  # its own helpers are the host's, not the recording shims
trap '' PIPE  # a reader that stops early (| head -n1) ends no answer with a status a pipefail would see
n=$MLREPRO_TRACE_NODES g=$MLREPRO_TRACE_GPUS model=$MLREPRO_TRACE_GPU_MODEL arch=$MLREPRO_TRACE_ARCH
hosts() { i=1; while [ "$i" -le "$n" ]; do echo "node$i"; i=$((i + 1)); done; }
gpus() { i=0; while [ "$i" -lt "$g" ]; do "$@" "$i"; i=$((i + 1)); done; }
gpu_line() { echo "GPU $1: $model (UUID: GPU-00000000-0000-0000-0000-00000000000$1)"; }
query() {  # nvidia-smi --query-gpu=a,b --format=csv[,noheader][,nounits]
  fields=$(echo "$1" | tr ',' ' ')
  case "$2" in *noheader*) ;; *) echo "$1" | sed 's/,/, /g' ;; esac
  i=0
  while [ "$i" -lt "$g" ]; do
    line=
    for f in $fields; do
      case $f in
        name|gpu_name) v=$model ;; index) v=$i ;; count) v=$g ;; uuid|gpu_uuid) v=GPU-0000000$i ;;
        memory.total) v="81559 MiB" ;; driver_version) v=550.54.15 ;; pci.bus_id) v=00000000:1$i:00.0 ;;
        *) v="[N/A]" ;;
      esac
      line=${line:+$line, }$v
    done
    echo "$line"; i=$((i + 1))
  done
}
case "$me" in
  srun)  # a node tool started on a node (srun -N1 nvidia-smi -L) answers as that node would, once
    tool=
    while [ $# -gt 0 ]; do
      case "${1##*/}" in
        nvidia-smi|ibstat|ibstatus|ibv_devinfo|numactl|lscpu|nproc|hostname|uname) tool=${1##*/}; shift; break ;;
        -*|[0-9]*) shift ;;
        *) break ;;
      esac
    done
    [ -n "$tool" ] && exec "${0%/*}/$tool" "$@" ;;
  scontrol)
    case "$1 $2" in
      "show hostnames"|"show hostname") hosts ;;
      "show job"|"show jobs"|"show jobid")
        echo "JobId=${3:-$MLREPRO_TRACE_JOB} JobName=${MLREPRO_TRACE_RUN_SUB##*/} UserId=${USER:-user}"
        echo "   JobState=RUNNING Partition=batch NumNodes=$n NumTasks=$n"
        echo "   NodeList=$SLURM_JOB_NODELIST BatchHost=node1"
        echo "   TRES=node=$n,gres/gpu=$((n * g))"
        echo "   Command=$MLREPRO_TRACE_RUN_SUB"
        echo "   WorkDir=$SLURM_SUBMIT_DIR" ;;
      "show node"|"show nodes")
        for h in $(hosts); do
          echo "NodeName=$h Arch=$arch CPUTot=$MLREPRO_TRACE_CPUS State=ALLOCATED Gres=gpu:$g"; done ;;
      "show partition"|"show partitions") echo "PartitionName=batch Nodes=$SLURM_JOB_NODELIST State=UP" ;;
    esac ;;
  sinfo) case " $* " in *" -h "*|*" --noheader "*) ;; *) echo "PARTITION AVAIL TIMELIMIT NODES STATE NODELIST";; esac
    echo "batch* up infinite $n alloc $SLURM_JOB_NODELIST" ;;
  squeue) case " $* " in *" -h "*|*" --noheader "*) ;; *) echo "JOBID PARTITION NAME ST NODES NODELIST";; esac
    echo "$MLREPRO_TRACE_JOB batch ${MLREPRO_TRACE_RUN_SUB##*/} R $n $SLURM_JOB_NODELIST" ;;
  nvidia-smi)
    case "$*" in
      *-L*|*--list-gpus*) gpus gpu_line ;;
      *--query-gpu=*)
        q= fmt=
        for a in "$@"; do case $a in --query-gpu=*) q=${a#--query-gpu=} ;; --format=*) fmt=${a#--format=} ;; esac; done
        query "$q" "$fmt" ;;
      topo*) echo "	$(gpus printf 'GPU%s	')CPU Affinity" ;;
      "") echo "NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  CUDA Version: 12.4"; gpus gpu_line ;;
    esac ;;
  ibstat) case "$1" in -l|--list_of_cas) gpus printf 'mlx5_%s\n' ;;
            *) gpus printf "CA 'mlx5_%s'\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n\t\tRate: 400\n" ;;
          esac ;;
  ibstatus) gpus printf "Infiniband device 'mlx5_%s' port 1 status:\n\tstate:\t\t 4: ACTIVE\n" ;;
  ibv_devinfo) case "$*" in *-l*) echo "$g HCAs found:"; gpus printf '\tmlx5_%s\n' ;;
                 *) gpus printf 'hca_id:\tmlx5_%s\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n' ;;
               esac ;;
  numactl) case "$1" in
             -H|--hardware) half=$((MLREPRO_TRACE_CPUS / 2)) last=$((MLREPRO_TRACE_CPUS - 1))
               echo "available: 2 nodes (0-1)"
               echo "node 0 cpus: $(seq -s ' ' 0 $((half - 1)))"; echo "node 1 cpus: $(seq -s ' ' "$half" "$last")" ;;
             -s|--show) echo "policy: default"; echo "physcpubind: $(seq -s ' ' 0 $((MLREPRO_TRACE_CPUS - 1)))" ;;
           esac ;;
  lscpu) echo "Architecture:        $arch"; echo "CPU(s):              $MLREPRO_TRACE_CPUS"
         echo "Thread(s) per core:  1"; echo "Socket(s):           2"; echo "NUMA node(s):        2"
         echo "Model name:          $MLREPRO_TRACE_CPU_MODEL" ;;
  nproc) echo "$MLREPRO_TRACE_CPUS" ;;
  hostname) case "$1" in -i|--ip-address|-I|--all-ip-addresses) echo "10.0.0.1" ;; -f|--fqdn) echo "node1.cluster" ;;
              *) echo "node1" ;; esac ;;
  uname) case "$1" in -m|-p|-i) echo "$arch" ;; -n|--nodename) echo "node1" ;; -r) echo "5.15.0" ;;
           -a) echo "Linux node1 5.15.0 #1 SMP $arch GNU/Linux" ;; *) echo "Linux" ;; esac ;;
  enroot) case "$1" in version) echo "3.4.1" ;; esac ;;
esac
exit 0
"""

# A host tool, through a shim that records it; GUARDED ones run only on paths inside the private folder.
_SHIM = r"""#!/bin/sh
{REC}
rec L "${0##*/}" "$@"
exec {real} "$@"
"""
_GUARD = r"""#!/bin/sh
{REC}
for a in "$@"; do
  case $a in -*) continue ;; esac
  p=$({realpath} -m -- "$a")
  case $p in "$MLREPRO_TRACE_ROOT"|"$MLREPRO_TRACE_ROOT"/*|/dev/null|/dev/stdout|/dev/stderr) ;;
    *) rec O "${0##*/}" "$@"
       [ "${0##*/}" = tee ] && exec {cat}
       exit 0 ;;
  esac
done
rec L "${0##*/}" "$@"
exec {real} "$@"
"""

# GPU model a stand-in nvidia-smi names, by the system name's accelerator (DGXSYSTEM), unless the config says
_GPU_MODELS = (("GB300", "NVIDIA GB300"), ("GB200", "NVIDIA GB200"), ("B200", "NVIDIA B200"),
               ("H200", "NVIDIA H200"), ("H100", "NVIDIA H100 80GB HBM3"), ("A100", "NVIDIA A100-SXM4-80GB"),
               ("V100", "Tesla V100-SXM3-32GB"))


@dataclass(frozen=True)
class Node:
    """An allocated node of the configured system, as the stand-ins describe it."""

    nodes: int = 1
    gpus_per_node: int = 8
    gpu_model: str = "NVIDIA GPU"
    arch: str = "x86_64"  # aarch64 for systems.<name>.platform linux/arm64
    cpus: int = 128

    @classmethod
    def of(cls, nodes: int, gpus_per_node: int, system: str, description: dict[str, str] | None = None,
           platform: str | None = None) -> Node:
        """The node of a system: its GPU model from ``systems.<name>.description.accelerator_model_name``, else
        from its name (DGXSYSTEM: DGXH100...); arm64 from ``platform``."""
        given = (description or {}).get("accelerator_model_name")
        model = given or next((m for key, m in _GPU_MODELS if key in system.upper()), "NVIDIA GPU")
        arch = "aarch64" if platform == "linux/arm64" else "x86_64"
        return cls(nodes, gpus_per_node, model, arch, 144 if arch == "aarch64" else 128)

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "gpu_model": self.gpu_model,
                "arch": self.arch, "cpus": self.cpus}


@dataclass(frozen=True)
class Command:
    argv: list[str]
    at: str  # file:line of run.sub (or a file it sourced) that ran it
    # step, query, local, outside (a change outside the sandbox: not made), unknown (FIRST_NODE), blocked (a cluster
    # tool called by its path, /usr/bin/srun: not run, and run.sub stopped there)
    kind: str


@dataclass(frozen=True)
class Error:
    """One of bash's errors for a parameter: ``name`` unset (``unbound variable``) or stopped on (``${X:?}``)."""

    file: str
    line: int
    name: str
    message: str


@dataclass(frozen=True)
class Trace:
    steps: list[list[str]]  # what runs on the cluster (RECORDED) in their order
    commands: list[Command] = field(default_factory=list)  # every command it ran, in their order
    statements: list[tuple[str, int, str]] = field(default_factory=list)  # (file, line, text) of the path taken
    exit_code: int = 0
    stderr_tail: str = ""
    errors: list[Error] = field(default_factory=list)

    @property
    def timed_out(self) -> bool:
        return self.exit_code == TIMED_OUT

    def steps_at(self) -> list[tuple[list[str], str]]:
        return [(c.argv, c.at) for c in self.commands if c.kind == "step"]


def hosts(nodes: int) -> list[str]:
    return [f"node{i}" for i in range(1, nodes + 1)]


def allocation_env(nodes: int, gpus_per_node: int, submit_dir: str, job_id: str = JOB_ID) -> dict[str, str]:
    """What Slurm sets in the batch script of a job of ``nodes`` nodes (the variables run.sub files read)."""
    node_list = "node1" if nodes == 1 else f"node[1-{nodes}]"
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NUM_NODES": str(nodes),
           "SLURM_NNODES": str(nodes), "SLURM_JOB_NODELIST": node_list, "SLURM_NODELIST": node_list,
           "SLURM_SUBMIT_DIR": submit_dir, "SLURM_SUBMIT_HOST": "login", "SLURM_JOB_NAME": "run.sub",
           "SLURM_JOB_PARTITION": "batch", "SLURMD_NODENAME": "node1", "SLURM_NODEID": "0", "SLURM_PROCID": "0",
           "SLURM_LOCALID": "0", "SLURM_CLUSTER_NAME": "cluster", "HOSTNAME": "node1"}
    if gpus_per_node:
        env["SLURM_GPUS_ON_NODE"] = str(gpus_per_node)
        env["SLURM_JOB_GPUS"] = env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus_per_node))
    return env


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o700)


def _tools(bin_dir: Path, shim_dir: Path) -> None:
    for name in (*RECORDED, *QUERIES):
        _write(bin_dir / name, _STANDIN.replace("{REC}", _REC))
    realpath, cat = shutil.which("realpath", path=HOST_PATH), shutil.which("cat", path=HOST_PATH)
    for name in (*LOCAL, *GUARDED):
        real = shutil.which(name, path=HOST_PATH)
        if real is None:
            continue  # not on this host: an unknown command (FIRST_NODE)
        text = (_GUARD if name in GUARDED and realpath and cat else _SHIM)
        _write(shim_dir / name, text.replace("{REC}", _REC).replace("{real}", shlex.quote(real)).replace(
            "{realpath}", shlex.quote(realpath or "")).replace("{cat}", shlex.quote(cat or "")))


def _copy(folder: Path, dest: Path) -> None:
    """The implementation folder's files into the sandbox; links stay links (a run folder is hostile: none is
    followed here)."""
    shutil.copytree(folder, dest, symlinks=True, ignore_dangling_symlinks=True)


def clean_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` without what would run code in bash or remove the sandbox (a config is data)."""
    return {k: v for k, v in env.items() if _NAME.match(k) and not RESERVED.match(k) and "\0" not in v}


def trace(run_sub: Path, env: dict[str, str], node: Node, timeout_s: float = 120) -> Trace:
    """Run ``run_sub`` in the sandbox as the first node of ``node``'s allocation; what it ran. ``env`` is what a run
    gives it; LOGDIR is a private folder, shown as the run's in what it ran (as is the folder's copy as the folder)."""
    folder = run_sub.parent.resolve()
    with tempfile.TemporaryDirectory(prefix="mlrepro-preview-") as tmp:
        root = Path(tmp).resolve()
        bin_dir, shim_dir, home, logdir = root / "bin", root / "shims", root / "home", root / "logs"
        for d in (bin_dir, shim_dir, home, logdir):
            d.mkdir()
        _tools(bin_dir, shim_dir)
        work = root / "work" / folder.name
        _copy(folder, work)
        record, setup = root / "trace", root / "setup.sh"
        record.touch()
        _write(setup, _SETUP)
        path = f"{bin_dir}{os.pathsep}{shim_dir}"
        full = {
            "HOME": str(home), "LANG": "C.UTF-8", "USER": os.environ.get("USER", "user"), "SHELL": "/bin/bash",
            **allocation_env(node.nodes, node.gpus_per_node, str(work)), **clean_env(env),
            "LOGDIR": str(logdir), "PATH": path, "BASH_ENV": str(setup),
            "MLREPRO_TRACE_FILE": str(record), "MLREPRO_TRACE_SETUP": str(setup), "MLREPRO_TRACE_PATH": path,
            "MLREPRO_TRACE_BLOCK": " ".join((*RECORDED, "scontrol", "scancel")),
            "MLREPRO_TRACE_ROOT": str(root), "MLREPRO_TRACE_RUN_SUB": str(work / run_sub.name),
            "MLREPRO_TRACE_JOB": JOB_ID, "MLREPRO_TRACE_NODES": str(node.nodes),
            "MLREPRO_TRACE_GPUS": str(node.gpus_per_node), "MLREPRO_TRACE_GPU_MODEL": node.gpu_model,
            "MLREPRO_TRACE_ARCH": node.arch, "MLREPRO_TRACE_CPUS": str(node.cpus),
            "MLREPRO_TRACE_CPU_MODEL": "Neoverse-V2" if node.arch == "aarch64" else "Intel(R) Xeon(R) Platinum 8480C",
        }
        out, err = root / "stdout", root / "stderr"
        with out.open("wb") as o, err.open("wb") as e:
            proc = subprocess.Popen([shutil.which("bash", path=HOST_PATH) or "/bin/bash", str(work / run_sub.name)],
                                    cwd=work, env=full, stdin=subprocess.DEVNULL, stdout=o, stderr=e,
                                    start_new_session=True)
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                code = TIMED_OUT
            finally:
                _kill_all(proc.pid, f"MLREPRO_TRACE_FILE={record}".encode())
                proc.wait()
        views = {str(work): str(folder), str(logdir): env.get("LOGDIR") or str(logdir)}
        text = _shown(record.read_bytes().decode("utf-8", errors="replace"), views)
        stderr = _shown(err.read_bytes().decode(errors="replace"), views)
        stdout = _shown(out.read_bytes().decode(errors="replace"), views)
    commands, statements = parse(text)
    # run.sub's own error (an unbound variable) is on stderr, or on stdout where its subshell's is piped (|& tee)
    tail = "\n".join(line for line in (stderr + stdout).splitlines() if "__mlrepro" not in line)
    return Trace([c.argv for c in commands if c.kind == "step"], commands, statements, code,
                 "\n".join(tail.splitlines()[-20:]), errors(stderr + "\n" + stdout))


def _shown(text: str, views: dict[str, str]) -> str:
    for private, shown in views.items():
        text = text.replace(private, shown)
    return text


def _kill_all(pid: int, marker: bytes) -> None:
    """Kill run.sub's process group (its session: start_new_session), then whatever of ours still carries the
    sandbox's marker in its environment (a daemon that left the group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    uid = os.getuid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != uid or marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


_KINDS = {"S": None, "L": "local", "O": "outside", "U": "unknown", "B": "blocked"}


def parse(text: str) -> tuple[list[Command], list[tuple[str, int, str]]]:
    """The recorded commands and the statements of the path taken (file, line, text)."""
    commands, statements = [], []
    for item in text.split(SEP):
        fields = item.split(UNIT)
        if len(fields) < 3:
            continue
        tag, at = fields[0], fields[1]
        if tag == "X":
            file, _, line = at.rpartition(":")
            statements.append((file, int(line) if line.isdigit() else 0, fields[2]))
        elif tag in _KINDS:
            argv = fields[2:-1]
            kind = _KINDS[tag] or ("step" if argv[0] in RECORDED else "query")
            commands.append(Command(argv, at, kind))
    return commands, statements


def errors(stderr: str) -> list[Error]:
    """bash's errors for parameters in ``stderr``: unbound variables, and ``${X:?...}`` where the line reads so."""
    found = []
    for m in _ERROR.finditer(stderr):
        file, line, name, message = m.group(1), int(m.group(2)), m.group(3), m.group(4).strip()
        if message != "unbound variable" and not _stops_on(file, line, name):
            continue
        found.append(Error(file, line, name, message))
    return found


def _stops_on(file: str, line: int, name: str) -> bool:
    """Whether ``file``'s line ``line`` stops on ``name`` (``${name:?...}``, ``${name?...}``): bash's message for
    it is the script's own."""
    path = Path(file)
    try:  # a path from run.sub's output: only a plain file of a script's size is read (not a FIFO a hostile one names)
        if not path.is_file() or path.stat().st_size > 4 << 20:
            return False
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return False
    return 0 < line <= len(lines) and re.search(r"\$\{" + re.escape(name) + r":?\?", lines[line - 1]) is not None


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


def mounts(step: list[str]) -> list[tuple[str, str]]:
    """(source, destination) of each of an srun step's ``--container-mounts`` (``src:dst[:flags]``, comma-separated;
    a lone path mounts itself)."""
    value = str(split(step)[0].get("--container-mounts") or "")
    found = []
    for item in value.split(","):
        if not item.strip():
            continue
        parts = item.split(":")
        found.append((parts[0], parts[1] if len(parts) > 1 else parts[0]))
    return found


def summarize(trace_: Trace) -> dict[str, Any]:
    """The training step (the srun that starts run_and_time.sh) and the cache clearing, as the preview lists them."""
    training = next((s for s in trace_.steps if s[0] == "srun" and any("run_and_time" in w for w in split(s)[1])),
                    None)
    clears = [s for s in trace_.steps if s[0] == "srun" and any("drop_caches" in w for w in s)]
    logs_clear = [s for s in trace_.steps if s[0] == "srun" and any("CACHE_CLEAR" in w for w in s)]
    found: dict[str, Any] = {"cache_clear": bool(clears), "cache_clear_logged": bool(logs_clear)}
    if training is not None:
        opts, command = split(training)
        listed = str(opts.get("--container-mounts", ""))
        found["training"] = {
            "ntasks": opts.get("--ntasks"), "ntasks_per_node": opts.get("--ntasks-per-node"),
            "mpi": opts.get("--mpi"), "workdir": opts.get("--container-workdir"),
            "mounts": [m.split(":")[1] for m in listed.split(",") if m.count(":") >= 1],
            "command": command,
        }
    return found
