"""A folder's own ``run.sub``: one run of it is one experiment (NEXP=1), launched as the folder's README says.

NVIDIA's READMEs launch a run as ``source config_<SYSTEM>.sh; CONT=<image> DATADIR=<data> LOGDIR=<logs>
sbatch -N $DGXNNODES -t $WALLTIME run.sub``. The pipeline asks Slurm for the same allocation (the run rule's
resources: nodes, WALLTIME, GPUs, and the ``#SBATCH`` lines of run.sub such as ``--exclusive`` and ``--mem=0``)
and runs ``bash run.sub`` in it with the variables of :func:`environment`. Every step the script takes (container
set-up on each node, cache clearing and its ``cache_clear`` line, the training srun with its task count, mounts,
MPI type and wrapper) is then the vendor's own. This module reads run.sub as text only (its ``#SBATCH`` lines and
the variables it stops on); it never runs it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from mlrepro.runs.launch_spec import LaunchSpec

RUN_SUB = "run.sub"
# the files beside run.sub that declare container mounts (run.sub reads them: mounts.txt with envsubst, or sources)
MOUNT_FILES = ("mounts.txt", "config_mounts.sh")
# sbatch options of run.sub's #SBATCH lines the allocation keeps (the job name is the executor's own)
KEPT_SBATCH = re.compile(r"^(--exclusive|--mem=\S+|--gpus-per-node=\S+|--gres=\S+|--ntasks-per-node=\S+)$")
_REQUIRED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):\?")
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_ASSIGNED = re.compile(r"(?:^|[\s;(])(?:export\s+|readonly\s+|local\s+|declare\s+(?:-\w+\s+)*)?"
                       r"([A-Za-z_][A-Za-z0-9_]*)\+?=")
_DEFAULTED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?[=-]")
_MOUNT_ASSIGN = re.compile(r"^\s*(?:export\s+|readonly\s+)?(_cont_mounts|CONT_MOUNTS|_CONT_MOUNTS)=(.*)$")
SHELL_VARS = {"PWD", "HOME", "USER", "HOSTNAME", "RANDOM", "OLDPWD", "BASH_SOURCE", "UID"}
# What a run sets itself (environment()), and what Slurm sets in the allocation
PROVIDED = ("CONT", "DATADIR", "LOGDIR", "DGXSYSTEM", "NEXP", "SEED", "MLPERF_SUBMISSION_ORG",
            "MLPERF_SUBMISSION_PLATFORM", "MLPERF_SUBMISSION_DIVISION", "MLPERF_SUBMISSION_STATUS")


def sbatch_options(run_sub: Path) -> list[str]:
    """The options of run.sub's ``#SBATCH`` lines, in their order (``--job-name x`` as two words)."""
    words: list[str] = []
    for line in run_sub.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#SBATCH"):
            words += line[len("#SBATCH"):].split("#", 1)[0].split()
    return words


def kept_sbatch(run_sub: Path) -> list[str]:
    """The #SBATCH options the run's allocation asks for as they are (``--exclusive``, ``--mem=0``)."""
    return [w for w in sbatch_options(run_sub) if KEPT_SBATCH.match(w)]


def _code(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
                     for line in text.splitlines())


def needed(folder: Path) -> dict[str, str]:
    """Variables the folder's run.sub needs set, each with the file that reads it: those it stops on
    (``: "${CONT:?...}"``) and those its container mounts name that it does not set itself (``${PKLDIR}`` of
    ``_cont_mounts=...``, each ``${VAR}`` of mounts.txt)."""
    run_sub = folder / RUN_SUB
    text = _code(run_sub.read_text(encoding="utf-8", errors="replace"))
    own = set(_ASSIGNED.findall(text)) | set(_DEFAULTED.findall(text))
    found = {name: str(run_sub) for name in _REQUIRED.findall(text) if name not in own}
    for line in text.splitlines():
        # the mounts every run has (an append such as `_cont_mounts="${_cont_mounts},${JET_DIR}:..."` is optional)
        if (m := _MOUNT_ASSIGN.match(line)) and m.group(1) not in m.group(2):
            for name in _REFERENCE.findall(m.group(2)):
                if name not in own and not name.startswith("_"):
                    found.setdefault(name, str(run_sub))
    for name in MOUNT_FILES:
        path = folder / name
        if path.is_file() and name in text:  # read only if run.sub reads it
            mounts = _code(path.read_text(encoding="utf-8", errors="replace"))
            mount_own = set(_ASSIGNED.findall(mounts)) | set(_DEFAULTED.findall(mounts))
            for ref in _REFERENCE.findall(mounts):
                if ref not in own and ref not in mount_own:
                    found.setdefault(ref, str(path))
    return found


def missing(folder: Path, given: Mapping[str, str]) -> list[tuple[str, str]]:
    """(variable, file) of each needed variable that neither the config file nor the config sets."""
    return [(name, where) for name, where in sorted(needed(folder).items())
            if name not in given and name not in PROVIDED and name not in SHELL_VARS and not name.startswith("SLURM_")]


def defaults(run_sub: Path) -> dict[str, str]:
    """The plain defaults run.sub gives itself (``: "${DGXNGPU:=8}"``): what it runs with where nothing sets them."""
    text = _code(run_sub.read_text(encoding="utf-8", errors="replace"))
    return dict(re.findall(r'^\s*:\s*"?\$\{([A-Za-z_][A-Za-z0-9_]*):=([0-9A-Za-z_./-]*)\}"?\s*$', text, re.MULTILINE))


def dgx_system(config_file: Path, env: Mapping[str, str]) -> str:
    """DGXSYSTEM: as the config file exports it, else its name (config_<DGXSYSTEM>.sh)."""
    return env.get("DGXSYSTEM") or config_file.name.removeprefix("config_").removesuffix(".sh")


def environment(launch: LaunchSpec, seed: int, log_dir: str, cont: str) -> dict[str, str]:
    """The variables run.sub runs with: the config file's, the config's (benchmarks.<bm>.env, then
    systems.<name>.env), then what the run sets (it wins): CONT, DATADIR, LOGDIR, NEXP=1, SEED, DGXSYSTEM and
    the submission's MLPERF_* fields."""
    sub = launch.submission
    return {
        **launch.env, **launch.runsub_env,
        "CONT": cont, "DATADIR": launch.data_dir, "LOGDIR": log_dir, "NEXP": "1", "SEED": str(seed),
        "MLPERF_SUBMISSION_ORG": sub["org"], "MLPERF_SUBMISSION_PLATFORM": sub["platform"],
        "MLPERF_SUBMISSION_DIVISION": sub["division"], "MLPERF_SUBMISSION_STATUS": sub["status"],
    }
