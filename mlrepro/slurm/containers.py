"""Containers on Slurm: the ``srun`` command lines for pyxis/enroot and for apptainer, as NVIDIA's run.sub
files write them (Training v1.1: ``../shared/data/mlperf_training_nvidia_implementations_v1.1.tar.xz``).

The ``srun`` prefixes come from :mod:`mlrepro.slurm.launch` (one task per node; the ranks).
pyxis: the image (an enroot squashfs made once from the locked image, or a registry ref) is imported once
per node into a named container (``srun --ntasks=<nodes> --container-image=... --container-name=... true``),
then every rank runs in that named container with the mounts
(``srun --ntasks=<nodes x tasks> --ntasks-per-node=<tasks> --container-name=... --container-mounts=src:dst,...``).
apptainer: every rank runs ``apptainer exec`` of the one SIF file (``--nv`` only for GPU jobs).
Either way the rank's environment is srun's (--export=ALL): the run's variables and Slurm's SLURM_PROCID,
from which each rank learns its place (:mod:`mlrepro.training.distributed`); so no ``--cleanenv``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from mlrepro.core.errors import MlreproError
from mlrepro.engines import Mount

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # \Z: a trailing newline is no name


class PluginMissing(MlreproError, RuntimeError):
    pass


def container_name(benchmark: str, run_dir: Path) -> str:
    """pyxis' name for a run's container: one per run folder (runs/<system>/<benchmark>/<i>), so that two runs
    never share one, of two systems either (a site's pyxis may keep named containers beyond a job)."""
    system = run_dir.parent.parent.name
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"mlrepro_{system}_{benchmark}_{run_dir.name}")


def _bind(m: Mount) -> str:
    for part in (str(m.path), m.inside):
        if "," in part or ":" in part:
            raise ValueError(f"mount {part}: pyxis and apptainer separate mounts with ',' and ':'; rename the folder")
    return f"{m.path}:{m.inside}{':ro' if m.read_only else ''}"


def _name(name: str) -> str:
    if not NAME.match(name):
        raise ValueError(f"container name {name!r}: letters, digits, '_', '.', '-' only")
    return name


def pyxis_import(srun_per_node: Sequence[str], image: str, name: str) -> list[str]:
    """Import the image once on every node into the named container (run.sub's `... true` line)."""
    return [*srun_per_node, f"--container-image={image}", f"--container-name={_name(name)}", "true"]


def pyxis_run(srun_ranks: Sequence[str], name: str, mounts: Sequence[Mount], workdir: str | None,
              argv: Sequence[str]) -> list[str]:
    """Every rank in the named container, with the run's mounts (src:dst[:ro], comma-separated)."""
    return [*srun_ranks, f"--container-name={_name(name)}", f"--container-mounts={','.join(map(_bind, mounts))}",
            "--no-container-mount-home", *([f"--container-workdir={workdir}"] if workdir else []), *argv]


def apptainer_run(srun_ranks: Sequence[str], sif: str, mounts: Sequence[Mount], gpus: bool, workdir: str | None,
                  argv: Sequence[str]) -> list[str]:
    binds = [arg for m in mounts for arg in ("--bind", _bind(m))]
    return [*srun_ranks, "apptainer", "exec", *(["--nv"] if gpus else []), "--no-home", *binds,
            *(["--pwd", workdir] if workdir else []), sif, *argv]


def one_process(engine: str) -> str:
    """Why a container engine other than enroot and apptainer cannot run a run of several processes."""
    return (f"engine {engine} runs one process per run; in containers, several processes of one run start on Slurm "
            "with engine enroot (pyxis) or apptainer")


def require_pyxis(run: Callable[[list[str]], subprocess.CompletedProcess[str]] | None = None) -> None:
    """pyxis adds --container-image to srun; without it srun would reject the run's command line late."""
    run = run or (lambda argv: subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False))
    help_text = run(["srun", "--help"]).stdout
    if "--container-image" not in help_text:
        raise PluginMissing("Slurm: srun has no --container-image: the pyxis plugin (with enroot) is not installed "
                            "on this cluster; install pyxis (https://github.com/NVIDIA/pyxis) or use "
                            "engine: apptainer")
