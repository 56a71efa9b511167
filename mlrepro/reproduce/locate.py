"""The implementation inside a package, and its config file for a system.

``benchmarks/<bm>/implementations/<impl>/`` in the MLCommons convention (run_and_time.sh, config_<SYSTEM>.sh),
a vendor's as it is, or this pipeline's own as mlrepro/package/assemble.py writes it (minis/<bm>/ holding
run_and_time.sh and config_CPU.sh, beside the training code mlrepro/ it imports). Only looked at here:
nothing in the package is run or sourced (its config file is sourced by a job, from the staged copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlrepro.core import safe_read
from mlrepro.reproduce.errors import ReproduceError
from mlrepro.runs.implementation import MINI, RUN_SCRIPT

# The folder of our minis in a package this pipeline assembled: minis/ today; packages assembled before the rename
# (issue 46: workflows/ read like Snakemake's `workflow`) hold workflows/ and still reproduce.
PACKAGED_MINIS = ("minis", "workflows")

_MAX_YAML_BYTES = 1 << 20  # an implementation's defaults.yaml or params.schema.yaml: a few kB


@dataclass(frozen=True)
class PackagedImplementation:
    """An implementation folder as a package holds it (mlrepro.runs.implementation.Implementation is one the
    pipeline runs)."""

    folder: Path  # implementations/<impl>/ in the package
    run_folder: Path  # the folder holding run_and_time.sh (ours: minis/<bm>/ inside ``folder``)
    config: Path  # the config file for the system
    kind: str  # MINI (this pipeline's own: shared code on PYTHONPATH, hyperparameters as JSON) or "folder"

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def dockerfile(self) -> Path | None:
        """The image's Dockerfile (a regular file): ours ``containers/<image>/Dockerfile`` (exactly one), a
        vendor's beside its run_and_time.sh; None without one."""
        found = (sorted(self.folder.glob("containers/*/Dockerfile")) if self.kind == MINI
                 else [self.run_folder / "Dockerfile"])
        ok = [f for f in found if f.is_file() and not f.is_symlink()]
        return ok[0] if len(ok) == 1 == len(found) else None


def _config_for(folder: Path, system: str, kind: str, chosen: str | None) -> Path | None:
    """The config file named ``chosen`` (system_config, as the pipeline takes it), else config_<X>.sh for
    ``system``: the longest X that the system's name starts with (NVIDIA's dgxa100_ngc21.09_mxnet ->
    config_DGXA100.sh); ours falls back to config_CPU.sh as the pipeline does."""
    if chosen:
        return folder / chosen if "/" not in chosen and (folder / chosen).is_file() else None
    matches = [p for p in folder.glob("config_*.sh")
               if system.lower().startswith(p.stem.removeprefix("config_").lower())]
    best = max(matches, key=lambda p: len(p.stem), default=None)
    if best is None and kind == MINI and (folder / "config_CPU.sh").is_file():
        return folder / "config_CPU.sh"
    return best


def locate_implementation(org_dir: Path, benchmark: str, system: str = "", system_config: str | None = None
                          ) -> PackagedImplementation:
    """The package's implementation of ``benchmark`` with its config file for ``system`` (or the file
    ``system_config`` names)."""
    base = org_dir / "benchmarks" / benchmark / "implementations"
    candidates: list[tuple[Path, Path, str]] = []
    for folder in sorted(p for p in base.glob("*") if p.is_dir()):
        if (folder / RUN_SCRIPT).is_file():
            candidates.append((folder, folder, "folder"))
        elif (folder / "mlrepro").is_dir():
            candidates += [(folder, folder / name / benchmark, MINI) for name in PACKAGED_MINIS
                           if (folder / name / benchmark / RUN_SCRIPT).is_file()][:1]
    if not candidates:
        present = ", ".join(sorted(p.name for p in base.glob("*"))) or "none"
        raise ReproduceError(
            f"The package {org_dir} has no runnable implementation of {benchmark}: {base} holds {present}, and none "
            f"has {RUN_SCRIPT} (the MLCommons convention) or minis/{benchmark}/{RUN_SCRIPT} beside mlrepro/ "
            f"(the layout this pipeline packages). Supply the implementation folder under {base}/<name>/, or leave "
            f"{benchmark} out with only=[...].")
    for folder, run_folder, kind in candidates:
        if (config := _config_for(run_folder, system, kind, system_config)) is not None:
            return PackagedImplementation(folder, run_folder, config, kind)
    configs = ", ".join(sorted(p.name for _, r, _ in candidates for p in r.glob("config_*.sh"))) or "none"
    raise ReproduceError(
        f"The package's implementation of {benchmark} ({', '.join(str(r) for _, r, _ in candidates)}) has no config "
        f"file for system {system}{f' named {system_config}' if system_config else ''} (it has: {configs}). Give "
        f"the system whose config_<SYSTEM>.sh it has, or name the file as benchmarks.{benchmark}.system_config.")


def read_yaml(path: Path, root: Path) -> Any:
    """A YAML file of the package (safe_load: no object construction), read with bounds."""
    try:
        return yaml.safe_load(safe_read.read_text(path, root, _MAX_YAML_BYTES))
    except safe_read.UnsafeInput as e:
        raise ReproduceError(f"{e}; the implementation's file cannot be read") from None
    except (yaml.YAMLError, RecursionError) as e:
        raise ReproduceError(f"{path}: not valid YAML ({str(e)[:300]})") from None


def implementation_params(impl: PackagedImplementation, root: Path) -> dict[str, Any]:
    """Ours: the hyperparameters its defaults.yaml gives; a vendor's take theirs from the config file."""
    defaults = impl.run_folder / "defaults.yaml"
    if impl.kind != MINI or not defaults.is_file():
        return {}
    params = read_yaml(defaults, root) or {}
    if not isinstance(params, dict):
        raise ReproduceError(f"{defaults}: not a mapping of hyperparameters")
    return params
