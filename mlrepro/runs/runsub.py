"""A folder's own ``run.sub``: one run of it is one experiment (NEXP=1), launched as the folder's README says.

NVIDIA's READMEs launch a run as ``source config_<SYSTEM>.sh; CONT=<image> DATADIR=<data> LOGDIR=<logs>
sbatch -N $DGXNNODES -t $WALLTIME run.sub``. The pipeline asks Slurm for the same allocation (the run rule's
resources: nodes, WALLTIME, GPUs, and the ``#SBATCH`` lines of run.sub such as ``--exclusive`` and ``--mem=0``)
and runs ``bash run.sub`` in it with the variables of :func:`environment`. Every step the script takes (container
set-up on each node, cache clearing and its ``cache_clear`` line, the training srun with its task count, mounts,
MPI type and wrapper) is then the vendor's own. This module reads run.sub as text only (its ``#SBATCH`` lines and
the defaults it gives itself); it never runs it: what a run needs set is found by running it, in a job
(mlrepro/runs/demands.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from mlrepro.runs.launch_spec import LaunchSpec

RUN_SUB = "run.sub"
# sbatch options of run.sub's #SBATCH lines the allocation keeps (the job name is the executor's own)
KEPT_SBATCH = re.compile(r"^(--exclusive|--mem=\S+|--gpus-per-node=\S+|--gres=\S+|--ntasks-per-node=\S+)$")


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


def defaults(run_sub: Path) -> dict[str, str]:
    """The plain defaults run.sub gives itself (``: "${DGXNGPU:=8}"``): what it runs with where nothing sets them."""
    text = _code(run_sub.read_text(encoding="utf-8", errors="replace"))
    return dict(re.findall(r'^\s*:\s*"?\$\{([A-Za-z_][A-Za-z0-9_]*):=([0-9A-Za-z_./-]*)\}"?\s*$', text, re.MULTILINE))


def dgx_system(config_file: Path, env: Mapping[str, str]) -> str:
    """DGXSYSTEM: as the config file exports it, else its name (config_<DGXSYSTEM>.sh)."""
    return env.get("DGXSYSTEM") or config_file.name.removeprefix("config_").removesuffix(".sh")


def unbuilt_image(folder: str | Path) -> str:
    """CONT where the image is still to be built from the folder's Dockerfile (the preview, the capture): one word,
    as run.sub files use CONT unquoted (`basename ${CONT}`)."""
    return f"<image-built-from:{folder}/Dockerfile>"


def environment(launch: LaunchSpec, seed: int, log_dir: str, cont: str) -> dict[str, str]:
    """The variables run.sub runs with (:func:`run_env` of the launch spec)."""
    return run_env(launch.env, launch.runsub_env, cont, launch.data_dir, log_dir, seed, launch.submission)


def run_env(config_env: Mapping[str, str], given: Mapping[str, str], cont: str, data_dir: str, log_dir: str,
            seed: int, submission: Mapping[str, str]) -> dict[str, str]:
    """The variables run.sub runs with: the config file's (``config_env``), the config's (``given``:
    DGXSYSTEM, benchmarks.<bm>.env, then systems.<name>.env), then what the run sets (it wins): CONT, DATADIR,
    LOGDIR, NEXP=1, SEED and the submission's MLPERF_* fields."""
    return {
        **config_env, **given,
        "CONT": cont, "DATADIR": data_dir, "LOGDIR": log_dir, "NEXP": "1", "SEED": str(seed),
        "MLPERF_SUBMISSION_ORG": submission["org"], "MLPERF_SUBMISSION_PLATFORM": submission["platform"],
        "MLPERF_SUBMISSION_DIVISION": submission["division"], "MLPERF_SUBMISSION_STATUS": submission["status"],
    }
