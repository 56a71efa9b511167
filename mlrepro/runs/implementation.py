"""An implementation folder in the MLCommons convention, ours ("mini") and a vendor's alike.

``<folder>/run_and_time.sh`` runs one timed run; ``<folder>/config_<SYSTEM>.sh`` exports the job
shape (DGXNNODES, DGXNGPU, WALLTIME, ...) and the hyperparameters; ``<folder>/Dockerfile`` builds
the image it runs in. Planning chooses the folder and its config file (:func:`resolve`); what the config file
exports is known once a job has sourced it (mlrepro/runs/capture.py), and :func:`captured` reads the job shape from
that; nothing here parses shell text or runs it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrepro import PACKAGE_ROOT, PROJECT_ROOT
from mlrepro.core.errors import MlreproError
from mlrepro.core.hashing import sha256_file
from mlrepro.runs.capture import CaptureError, config_exists
from mlrepro.runs.executed_code import mini_run_files
from mlrepro.runs.runsub import RUN_SUB, defaults
from mlrepro.slurm.resources import ShapeError, shape_from_config_sh

MINI = "mini"
RUN_SCRIPT = "run_and_time.sh"
# Where NVIDIA's run_with_docker.sh mounts the dataset (v1.1 and v2.0); every other benchmark uses /data.
DATA_MOUNTS = {"bert": "/workspace/data", "dlrm": "/raid/datasets/criteo/mlperf", "rnnt": "/datasets"}
LOG_MOUNT = "/results"


class ImplementationError(MlreproError, ValueError):
    """An implementation folder or config file the pipeline cannot use; the message says what to do."""


@dataclass(frozen=True)
class Implementation:
    benchmark: str
    kind: str  # "mini" or "folder"
    folder: Path
    config_file: Path
    image: str  # the name of its image (its build record is {outdir}/containers/{image}.json)
    data_mount: str
    log_mount: str = LOG_MOUNT
    # a folder's ready image (benchmarks.<bm>.image: a registry reference or a .sqsh file), its run.sub's CONT;
    # None: built from its Dockerfile
    container: str | None = None

    @property
    def name(self) -> str:
        """The folder name under <org>/benchmarks/<benchmark>/implementations/."""
        return "mlrepro-pytorch" if self.kind == MINI else self.folder.name

    @property
    def run_sub(self) -> Path | None:
        """A vendor folder's own Slurm launch script: one run is one experiment of it (mlrepro/runs/runsub.py)."""
        return run_sub_of(self.folder, self.kind)

    def digest(self, files: str) -> str:
        """Content of what runs: the folder's files (``files``: mlrepro.runs.capture.folder_digest) and, for ours,
        every project file a run executes."""
        h = hashlib.sha256(f"{files}\n".encode())
        if self.kind == MINI:
            for path in mini_run_files(self.folder):
                h.update(f"{path.relative_to(PACKAGE_ROOT).as_posix()}\0{sha256_file(path)}\n".encode())
        return h.hexdigest()

    def script_in_container(self) -> str:
        # ours is installed at /opt/mlrepro (containers/pytorch/Dockerfile); a vendor's image has its
        # folder in its WORKDIR, where NVIDIA's run_with_docker.sh runs ./run_and_time.sh
        if self.kind == MINI:
            return f"/opt/mlrepro/minis/{self.benchmark}/{RUN_SCRIPT}"
        return f"./{RUN_SCRIPT}"


def run_sub_of(folder: Path, kind: str) -> Path | None:
    path = folder / RUN_SUB
    return path if kind != MINI and path.is_file() else None


@dataclass(frozen=True)
class Captured:
    """What planning takes from a config file's capture record: its variables and the job shape they give."""

    env: dict[str, str]  # the variables the config file exports (DGXNGPU from run.sub's default where it has one)
    nodes: int
    gpus_per_node: int
    walltime_minutes: float | None

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def captured(env: dict[str, str], config_file: Path, folder: Path, kind: str) -> Captured:
    """The job shape of a captured config file; ImplementationError naming the file and the variable."""
    # later rounds' run.sub files default it (`: "${DGXNGPU:=8}"`) and their config files leave it out
    if "DGXNGPU" not in env and (run_sub := run_sub_of(folder, kind)) and (gpus := defaults(run_sub).get("DGXNGPU")):
        env = {**env, "DGXNGPU": gpus}
    return Captured(env, nodes=_count(env, "DGXNNODES", 1, config_file),
                    gpus_per_node=_count(env, "DGXNGPU", None, config_file),
                    walltime_minutes=_walltime(env.get("WALLTIME"), config_file))


def unit_problems(env: dict[str, str], *, system: str, benchmark: str, config_file: str, folder: str, kind: str,
                  system_nodes: int | None, given: dict[str, str], chosen_by: str) -> list[str]:
    """What stops a (system, benchmark)'s runs, given its config file's variables ``env``, each problem a line naming
    the key, the file and what to set: a job shape that is no number, a DGXNNODES other than the system's nodes.
    ``given``: the config's env for the unit, which run.sub gets over the config file's variables; ``chosen_by``: the
    config key that chose the config file. Both planning (a record that exists) and the capture job
    (the record it has just made) ask; what its run.sub needs set is found by running it, by the capture job only
    (mlrepro/runs/demands.py)."""
    config, where = Path(config_file), Path(folder)
    try:
        # run.sub runs with the config's env over the config file's (runsub.environment): so is its shape
        shape = captured({**env, **given} if run_sub_of(where, kind) else env, config, where, kind)
        shape_from_config_sh(shape.env)
    except ImplementationError as e:
        return [f"  {chosen_by}: {e}"]
    except ShapeError as e:
        return [f"  {chosen_by}: {config}: {e}"]
    problems = []
    if system_nodes is not None and kind != MINI and shape.nodes != system_nodes:
        problems.append(f"  systems.{system}: {benchmark}: {config.name} sets DGXNNODES={shape.nodes}, the system has "
                        f"nodes: {system_nodes}; choose its config file in config_files.{benchmark}")
    return problems


def _walltime(value: str | None, config: Path) -> float | None:
    if not value:
        return None
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)  # minutes, as sbatch --time takes a bare number
    if m := re.fullmatch(r"(?:(\d+)-)?(\d+(?::\d+){0,2})", value):  # sbatch --time forms
        parts = [int(x) for x in m.group(2).split(":")]
        if len(parts) == 1:  # minutes, or with days: hours ("2-12")
            parts = [parts[0], 0, 0] if m.group(1) else [0, parts[0], 0]
        h, mins, s = [0, *parts] if len(parts) == 2 else parts
        return int(m.group(1) or 0) * 1440 + h * 60 + mins + s / 60
    raise ImplementationError(f"{config}: WALLTIME={value!r} is neither minutes nor [D-]HH:MM[:SS]")


def _count(env: dict[str, str], key: str, default: int | None, config: Path) -> int:
    value = env.get(key)
    if value is None:
        if default is None:
            raise ImplementationError(f"{config}: it does not export {key}, which gives the job's shape; "
                                      f"add `export {key}=<n>` to it")
        return default
    if not value.isdigit():
        raise ImplementationError(f"{config}: {key}={value!r} is not a whole number")
    return int(value)


def resolve(benchmark: str, choice: str, system: str, system_config: str | None, mounts: dict[str, str],
            base_dir: Path, image: str | None) -> Implementation:
    """The implementation of ``benchmark`` the config chose, with its config file (sourced later, by a job: its
    variables are not read here); errors name the file."""
    if choice == MINI:
        kind, folder = MINI, PROJECT_ROOT / "minis" / benchmark
    else:
        kind, folder = "folder", (base_dir / choice).resolve()
        if not folder.is_dir():
            raise ImplementationError(f"{folder}: benchmarks.{benchmark}.implementation names no folder; "
                                      f"give the path of a folder holding {RUN_SCRIPT} and config_*.sh")
    if not (folder / RUN_SCRIPT).is_file():
        raise ImplementationError(f"{folder}: no {RUN_SCRIPT}; an implementation folder in the MLCommons "
                                  f"convention starts one timed run with it")
    name = system_config or f"config_{system}.sh"
    if system_config is None and kind == MINI and not (folder / name).is_file():
        name = "config_CPU.sh"  # ours: the CPU default unless the folder has one for this system
    if "/" in name or name in ("", ".", ".."):
        raise ImplementationError(f"benchmarks.{benchmark}.system_config: {name!r} must be a file name "
                                  f"in {folder}")
    config = folder / name
    try:
        config_exists(config)
    except CaptureError as e:
        raise ImplementationError(str(e)) from None
    container = None
    if kind == "folder":
        container = image
        if container is None and not (folder / "Dockerfile").is_file():
            raise ImplementationError(f"{folder}: no Dockerfile; the image a run uses is built from it (or name a "
                                      "ready one with benchmarks.<bm>.image: a registry reference or a .sqsh file)")
        image = re.sub(r"[^a-z0-9_.-]+", "-", f"{benchmark}-{folder.name}".lower())
    return Implementation(
        benchmark=benchmark, kind=kind, folder=folder, config_file=config, image=str(image),
        data_mount=mounts.get("data", DATA_MOUNTS.get(benchmark, "/data")),
        log_mount=mounts.get("logs", LOG_MOUNT), container=container)


def describe(impl: Implementation, shape: Captured) -> dict[str, Any]:
    """What the report shows of it."""
    return {"kind": impl.kind, "name": impl.name, "folder": str(impl.folder), "config_file": impl.config_file.name,
            "nodes": shape.nodes, "gpus_per_node": shape.gpus_per_node, "walltime_minutes": shape.walltime_minutes,
            "config": shape.env}
