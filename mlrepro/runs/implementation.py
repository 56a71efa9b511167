"""An implementation folder in the MLCommons convention, ours ("mini") and a vendor's alike.

``<folder>/run_and_time.sh`` runs one timed run; ``<folder>/config_<SYSTEM>.sh`` exports the job
shape (DGXNNODES, DGXNGPU, WALLTIME, ...) and the hyperparameters; ``<folder>/Dockerfile`` builds
the image it runs in. The config file is sourced by bash in a clean environment and its variables
are captured; nothing here parses shell text.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrepro import PACKAGE_ROOT, PROJECT_ROOT
from mlrepro.core.errors import MlreproError
from mlrepro.core.hashing import sha256_file
from mlrepro.runs import capture_cache
from mlrepro.runs.executed_code import mini_run_files
from mlrepro.runs.runsub import RUN_SUB, defaults

MINI = "mini"
RUN_SCRIPT = "run_and_time.sh"
# Where NVIDIA's run_with_docker.sh mounts the dataset (v1.1 and v2.0); every other benchmark uses /data.
DATA_MOUNTS = {"bert": "/workspace/data", "dlrm": "/raid/datasets/criteo/mlperf", "rnnt": "/datasets"}
LOG_MOUNT = "/results"
# The clean environment a config file is sourced in; NEXP=1: one run per job (NVIDIA's run.sub sets it).
CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "NEXP": "1"}
_SKIP = ("__pycache__", ".pyc")


class ImplementationError(MlreproError, ValueError):
    """An implementation folder or config file the pipeline cannot use; the message says what to do."""


@dataclass(frozen=True)
class Implementation:
    benchmark: str
    kind: str  # "mini" or "folder"
    folder: Path
    config_file: Path
    env: dict[str, str]  # the variables the config file exports
    nodes: int
    gpus_per_node: int
    walltime_minutes: float | None
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
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def run_sub(self) -> Path | None:
        """A vendor folder's own Slurm launch script: one run is one experiment of it (mlrepro/runs/runsub.py)."""
        path = self.folder / RUN_SUB
        return path if self.kind != MINI and path.is_file() else None

    def digest(self) -> str:
        """Content of what runs: the folder's files and, for ours, every project file a run executes. Listed
        here, when a run's params ask (once per folder, mlrepro/planning/plan.py), not when the config is read."""
        h = hashlib.sha256()
        for rel in folder_files(self.folder):
            h.update(f"{rel}\0{sha256_file(self.folder / rel)}\n".encode())
        if self.kind == MINI:
            for path in mini_run_files(self.folder):
                h.update(f"{path.relative_to(PACKAGE_ROOT).as_posix()}\0{sha256_file(path)}\n".encode())
        return h.hexdigest()

    def script_in_container(self) -> str:
        # ours is installed at /opt/mlrepro (containers/pytorch/Dockerfile); a vendor's image has its
        # folder in its WORKDIR, where NVIDIA's run_with_docker.sh runs ./run_and_time.sh
        if self.kind == MINI:
            return f"/opt/mlrepro/workflows/{self.benchmark}/{RUN_SCRIPT}"
        return f"./{RUN_SCRIPT}"


def folder_files(folder: Path) -> tuple[str, ...]:
    return tuple(sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                        if p.is_file() and not any(s in p.as_posix() for s in _SKIP)))


def _bash_env(script: str, config: Path | None, cwd: Path) -> dict[str, str]:
    args = ["bash", "-c", script, "bash", *([str(config)] if config else [])]
    proc = subprocess.run(args, cwd=cwd, env=CLEAN_ENV, capture_output=True, check=False)
    if proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace").strip()[-2000:]
        raise ImplementationError(f"{config}: sourcing it with bash failed (exit {proc.returncode}):\n{stderr}\n"
                                  "Fix the config file, or choose another with benchmarks.<bm>.system_config.")
    return parse_env0(proc.stdout)


def parse_env0(data: bytes) -> dict[str, str]:
    """The variables ``env -0`` printed."""
    env = {}
    for item in data.split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep:
            env[key] = value
    return env


_BASELINE: dict[Path, dict[str, str]] = {}


def capture(config: Path) -> dict[str, str]:
    """The variables ``config`` exports (``set -a``: plain assignments too), sourced in a clean environment.

    What bash itself sets (PWD, SHLVL, _) and the clean environment's own values are left out unless
    the file changes them. Reused while no file of its folder changed (mlrepro/runs/capture_cache.py).
    """
    if not config.is_file():
        there = ", ".join(sorted(p.name for p in config.parent.glob("config_*.sh"))) or "none"
        raise ImplementationError(f"{config}: no such config file; set benchmarks.<bm>.system_config to one of "
                                  f"the folder's config_<SYSTEM>.sh files (there: {there})")
    entry = capture_cache.key(config, CLEAN_ENV)
    if (cached := capture_cache.get(entry)) is not None:
        return cached
    cwd = config.parent
    if cwd not in _BASELINE:
        _BASELINE[cwd] = _bash_env("env -0", None, cwd)
    base = _BASELINE[cwd]
    # what the file prints goes to stderr: on stdout it would run into the first variable
    env = _bash_env('set -a; source "$1" >&2; env -0', config.resolve(), cwd)
    captured = {k: v for k, v in env.items() if k != "_" and base.get(k) != v}
    capture_cache.put(entry, captured)
    return captured


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
    """The implementation of ``benchmark`` the config chose, its config file captured; errors name the file."""
    if choice == MINI:
        kind, folder = MINI, PROJECT_ROOT / "workflows" / benchmark
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
    env = capture(config)
    # later rounds' run.sub files default it (`: "${DGXNGPU:=8}"`) and their config files leave it out
    if kind != MINI and "DGXNGPU" not in env and (folder / RUN_SUB).is_file() and (
            gpus := defaults(folder / RUN_SUB).get("DGXNGPU")):
        env = {**env, "DGXNGPU": gpus}
    container = None
    if kind == "folder":
        container = image
        if container is None and not (folder / "Dockerfile").is_file():
            raise ImplementationError(f"{folder}: no Dockerfile; the image a run uses is built from it (or name a "
                                      "ready one with benchmarks.<bm>.image: a registry reference or a .sqsh file)")
        image = re.sub(r"[^a-z0-9_.-]+", "-", f"{benchmark}-{folder.name}".lower())
    return Implementation(
        benchmark=benchmark, kind=kind, folder=folder, config_file=config, env=env,
        nodes=_count(env, "DGXNNODES", 1, config), gpus_per_node=_count(env, "DGXNGPU", None, config),
        walltime_minutes=_walltime(env.get("WALLTIME"), config), image=str(image),
        data_mount=mounts.get("data", DATA_MOUNTS.get(benchmark, "/data")),
        log_mount=mounts.get("logs", LOG_MOUNT), container=container)


def describe(impl: Implementation) -> dict[str, Any]:
    """What the report and run.json show of it."""
    return {"kind": impl.kind, "name": impl.name, "folder": str(impl.folder), "config_file": impl.config_file.name,
            "nodes": impl.nodes, "gpus_per_node": impl.gpus_per_node, "walltime_minutes": impl.walltime_minutes,
            "config": impl.env}
