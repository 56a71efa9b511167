"""Which mlperf-logging judges a round, and running the audit under it in an isolated interpreter.

Rules change between mlperf-logging releases (the seed checker's "logs no seed", the accepted
``status`` values, RCP tables, scaling), so a round is judged by the release it was checked with:
the last tag before its results. A version lives in its own install folder: a checkout of
mlcommons/logging at a tag, or ``pip install --target DIR git+https://github.com/mlcommons/logging@TAG``.
The project never imports it: the audit's steps re-run themselves in a subprocess whose
``PYTHONPATH`` starts with that folder (then the project's own package, which holds no
``mlperf_logging``), and the subprocess checks that every ``mlperf_logging`` module it imported
comes from the folder, never from the installed release.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mlrepro import PACKAGE_ROOT
from mlrepro.core.errors import MlreproError

# The tag each Training round was checked with (mlcommons/logging), by the round's ruleset.
ROUND_TAGS = {
    "1.0.0": "1.0.0", "1.1.0": "1.1.0-rc4", "2.0.0": "2.0.0", "2.1.0": "2.1.0", "3.0.0": "3.0.0-rc2",
    "3.1.0": "3.1.0-rc3", "4.0.0": "4.0.0-rc3-rcp-prunning", "4.1.0": "4.1.0-rc4", "5.0.0": "5.0.0-rc3",
    "5.1.0": "5.1.0-rc4", "6.0.0": "6.0.0-rc6",
}
# Set in the isolated interpreter: the folder whose mlperf_logging judges.
_ENV = "MLREPRO_AUDIT_LOGGING"


class VersionError(MlreproError, ValueError):
    """A configured mlperf-logging folder that cannot judge (missing, or not a version)."""


@dataclass(frozen=True)
class Judge:
    """The mlperf-logging that judges: its folder, a label saying which version, and a content digest."""

    folder: Path
    label: str
    digest: str  # of its mlperf_logging sources: two folders of the same label with edits differ

    def to_dict(self) -> dict[str, str]:
        return {"label": self.label, "folder": self.folder.name, "sha256": self.digest}


def _has_package(folder: Path) -> bool:
    return (folder / "mlperf_logging" / "__init__.py").is_file()


def resolve(configured: Path, ruleset: str) -> Path:
    """The install folder of the version that judges ``ruleset``.

    ``configured`` is either one version's folder (it holds ``mlperf_logging/``), or a folder of
    versions named by tag (as ``pip install --target DIR/<tag>`` or a checkout per tag leaves
    them), from which the round's tag is chosen."""
    folder = configured.expanduser().resolve()
    if not folder.is_dir():
        raise VersionError(f"audit_logging={configured}: not a folder; point it at a checkout of mlcommons/logging "
                           "at a tag, or at a folder of such checkouts named by tag")
    if _has_package(folder):
        return folder
    tag = ROUND_TAGS.get(ruleset)
    if tag is None:
        raise VersionError(f"audit_logging={configured}: no round tag is known for ruleset {ruleset}; point "
                           "audit_logging at the version's own folder")
    chosen = folder / tag
    if not _has_package(chosen):
        raise VersionError(f"audit_logging={configured}: the ruleset {ruleset} is judged by mlperf-logging {tag}, "
                           f"but {chosen} holds no mlperf_logging/; install it with `pip install --target "
                           f"{chosen} git+https://github.com/mlcommons/logging@{tag}`")
    return chosen


def later_releases(configured: Path, ruleset: str) -> list[Path]:
    """The releases after the round's tag in a folder of versions by tag, in release order: they hold the
    round's RCP tables as the review left them (``rcp_review``). None where ``configured`` is one version."""
    folder = configured.expanduser().resolve()
    if _has_package(folder) or ruleset not in ROUND_TAGS:
        return []
    rounds = list(ROUND_TAGS)
    return [folder / ROUND_TAGS[r] for r in rounds[rounds.index(ruleset) + 1:] if _has_package(folder / ROUND_TAGS[r])]


def _label(folder: Path) -> str:
    """The version as its folder says it: the pip-installed release, else the folder's name (its tag)."""
    dist = sorted(folder.glob("mlperf_logging-*.dist-info"))
    if dist:
        return dist[0].name.removeprefix("mlperf_logging-").removesuffix(".dist-info")
    return folder.name


def describe(folder: Path) -> Judge:
    digest = hashlib.sha256()
    package = folder / "mlperf_logging"
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return Judge(folder, _label(folder), digest.hexdigest())


def current() -> Judge | None:
    """The judging version where this interpreter runs isolated under one (None: the installed release)."""
    folder = os.environ.get(_ENV)
    return describe(Path(folder)) if folder else None


def isolated(folder: Path) -> bool:
    """Whether this interpreter already runs isolated under ``folder``."""
    return os.environ.get(_ENV) == str(folder)


def run_isolated(folder: Path, args: list[str], stdin: str | None = None) -> int:
    """Run ``python ARGS`` with ``folder``'s mlperf_logging first on the path (``stdin``: its standard input);
    its exit status."""
    # no bytecode written into the release's folder: a cached release is verified file by file before each use
    env = {**os.environ, _ENV: str(folder), "PYTHONPATH": os.pathsep.join([str(folder), str(PACKAGE_ROOT)]),
           "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-P", *args], env=env, input=stdin, text=stdin is not None,
                          check=False).returncode


def assert_isolated() -> None:
    """Fail unless every imported ``mlperf_logging`` module comes from the judging folder."""
    folder = os.environ.get(_ENV)
    if not folder:
        return
    root = Path(folder).resolve()
    strays = [name for name, module in list(sys.modules.items())
              if (name == "mlperf_logging" or name.startswith("mlperf_logging."))
              and getattr(module, "__file__", None) and not Path(module.__file__).resolve().is_relative_to(root)]
    if strays:
        raise VersionError(f"mlperf_logging modules from outside {root}: {', '.join(sorted(strays)[:5])}")


def label() -> str:
    """The version that judges in this interpreter, as the report and CSV name it."""
    judge = current()
    if judge is not None:
        return judge.label
    from importlib.metadata import version

    return version("mlperf-logging")
