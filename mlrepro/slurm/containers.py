"""Containers on Slurm: the ``srun`` command lines for pyxis/enroot and for apptainer, as NVIDIA's run.sub
files write them (Training v1.1: ``../shared/data/mlperf_training_nvidia_implementations_v1.1.tar.xz``).

pyxis: the image (an enroot squashfs made once from the locked image, or a registry ref) is imported once
per node into a named container (``srun --ntasks=<nodes> --container-image=... --container-name=... true``),
then every rank runs in that named container with the mounts
(``srun --ntasks=<nodes x tasks> --ntasks-per-node=<tasks> --container-name=... --container-mounts=src:dst,...``).
apptainer: every rank runs ``apptainer exec`` of the one SIF file (``--nv`` only for GPU jobs).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence

from mlrepro.engines import Mount

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class PluginMissing(RuntimeError):
    pass


def _mounts(mounts: Sequence[Mount]) -> str:
    for m in mounts:
        if "," in str(m.path) or ":" in str(m.path):
            raise ValueError(f"mount {m.path}: pyxis separates mounts with ',' and ':'; rename the folder")
    return ",".join(f"{m.path}:{m.path}{':ro' if m.read_only else ''}" for m in mounts)


def pyxis(image: str, name: str, mounts: Sequence[Mount], nodes: int, tasks_per_node: int,
          argv: Sequence[str]) -> list[list[str]]:
    """The two srun command lines of a pyxis run: import the image on every node, then run every rank."""
    if not NAME.match(name):
        raise ValueError(f"container name {name!r}: letters, digits, '_', '.', '-' only")
    setup = ["srun", f"--ntasks={nodes}", "--ntasks-per-node=1", f"--container-image={image}",
             f"--container-name={name}", "true"]
    run = ["srun", "--kill-on-bad-exit=1", f"--ntasks={nodes * tasks_per_node}",
           f"--ntasks-per-node={tasks_per_node}", f"--container-name={name}",
           f"--container-mounts={_mounts(mounts)}", "--no-container-mount-home", *argv]
    return [setup, run]


def apptainer(sif: str, mounts: Sequence[Mount], nodes: int, tasks_per_node: int, gpus: bool,
              argv: Sequence[str]) -> list[str]:
    binds = [arg for m in mounts for arg in ("--bind", f"{m.path}:{m.path}{':ro' if m.read_only else ''}")]
    return ["srun", "--kill-on-bad-exit=1", f"--ntasks={nodes * tasks_per_node}",
            f"--ntasks-per-node={tasks_per_node}", "apptainer", "exec", *(["--nv"] if gpus else []),
            "--cleanenv", *binds, sif, *argv]


def require_pyxis(run: Callable[[list[str]], subprocess.CompletedProcess[str]] | None = None) -> None:
    """pyxis adds --container-image to srun; without it srun would reject the run's command line late."""
    run = run or (lambda argv: subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False))
    help_text = run(["srun", "--help"]).stdout
    if "--container-image" not in help_text:
        raise PluginMissing("Slurm: srun has no --container-image: the pyxis plugin (with enroot) is not installed "
                            "on this cluster; install pyxis (https://github.com/NVIDIA/pyxis) or use "
                            "engine: apptainer")
