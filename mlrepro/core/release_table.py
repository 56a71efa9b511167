"""The releases table (``releases.yaml``): which PyPI mlperf-logging release judges each ruleset from 5.0.0 on, where
it lives in the user's cache, and what it says of the ruleset's benchmarks, known before it is installed.

Only the table and its paths, read while the DAG is planned: installing and verifying are
:mod:`mlrepro.core.releases`'s (kept apart, so that the training code that reads the rules, mlrepro.core.rulesets,
does not import them: a run's ``computes`` digest covers the code it imports).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from mlrepro.core import versions
from mlrepro.core.errors import MlreproError

TABLE = Path(__file__).with_name("releases.yaml")
MANIFEST = ".mlrepro-release.json"
DIST = "mlperf-logging"


class ReleaseError(MlreproError, RuntimeError):
    """A pinned release that is missing, cannot be installed, or fails its verification (says what to do)."""


@dataclass(frozen=True)
class Pin:
    """One row of the table."""

    usage: str
    ruleset: str
    version: str
    wheel: str
    sha256: str
    tree: str  # versions.describe's digest of the release's mlperf_logging/
    benchmarks: tuple[tuple[str, int], ...]  # its benchmark_meta's allowed benchmarks and result file counts

    @property
    def name(self) -> str:
        return f"{DIST}-{self.version}"

    def requirement(self) -> str:
        """The requirements file pip installs it from: the exact version, its one allowed hash."""
        return f"{DIST}=={self.version} --hash=sha256:{self.sha256}\n"

    def command(self) -> str:
        """The one command that installs it by hand."""
        return f"python -m mlrepro.core.releases install {self.ruleset}"

    def meta(self) -> dict[str, Any]:
        """The release's two benchmark_meta tables, as far as the ruleset goes (mlrepro.core.rulesets reads them)."""
        return {"_ALL_RESULT_FILE_COUNTS": {self.usage: dict(self.benchmarks)},
                "_ALL_ALLOWED_BENCHMARKS": {self.usage: {self.ruleset: [b for b, _ in self.benchmarks]}}}


@cache
def pins() -> tuple[Pin, ...]:
    table = yaml.safe_load(TABLE.read_text(encoding="utf-8"))
    return tuple(Pin(usage, str(ruleset), str(row["version"]), row["wheel"], row["sha256"], row["tree"],
                     tuple((str(b), int(n)) for b, n in row["benchmarks"].items()))
                 for usage, rows in table.items() for ruleset, row in rows.items())


def pinned(ruleset: str, usage: str = "training") -> Pin | None:
    """The table's row for ``ruleset`` (None: not in the table)."""
    return next((p for p in pins() if p.usage == usage and p.ruleset == ruleset), None)


# --- where a release lives
def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/mlrepro/releases`` (``~/.cache`` without it): computed, never made, while planning."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    if not root.is_absolute():
        raise ReleaseError(f"XDG_CACHE_HOME={root}: not an absolute path; set it to a folder of yours")
    return root / "mlrepro" / "releases"


def folder(pin: Pin) -> Path:
    return cache_dir() / pin.name


def stamp(pin: Pin) -> Path:
    """The install job's output (Snakemake's): beside the folder, so that a job rewriting it never touches the
    release, and a deleted cache makes the job run again."""
    return cache_dir() / f"{pin.name}.ok"


def of_folder(path: Path) -> Pin | None:
    """The pin whose cache folder ``path`` is (None: a folder the user gave); also where a job's environment names
    another cache than planning's, by its name and its manifest."""
    return next((p for p in pins() if folder(p) == path or (path.name == p.name and (path / MANIFEST).exists())),
                None)


@cache
def venv_has(pin: Pin) -> bool:
    """Whether the venv's own mlperf-logging is exactly ``pin``: its version, and its tree's digest."""
    try:
        if metadata.version(DIST) != pin.version:
            return False
    except metadata.PackageNotFoundError:
        return False
    import mlperf_logging  # the installed one: the project imports it anyway

    return versions.describe(Path(mlperf_logging.__file__).resolve().parent.parent).digest == pin.tree


def judging_folder(ruleset: str, usage: str = "training") -> Path | None:
    """The cache folder of the release that judges ``ruleset``; None where the table has no row for it or the
    venv's own mlperf-logging is that release."""
    pin = pinned(ruleset, usage)
    return None if pin is None or venv_has(pin) else folder(pin)


def stamps(release: Path | None) -> list[str]:
    """What a step judged by ``release`` waits for: the install job's stamp of a cached release (else none)."""
    pin = of_folder(release) if release is not None else None
    return [str(stamp(pin))] if pin else []
