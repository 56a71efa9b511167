"""What the rule files ask of the running Snakemake, through its documented interfaces only (the workflow API that
its docs name, its command line and profiles; tests/test_snakemake_api.py holds the list)."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def signature_once(func: F) -> F:
    """``func`` with its signature recorded. Snakemake reads a rule's function's signature (``inspect.signature``)
    at every job, to learn which of input, output, threads, ... it takes: at 900 runs, about 0.15 s of every
    invocation for each function of the run rule (benchmarks/planning_scale.py). ``inspect.signature`` returns a
    function's ``__signature__`` when it has one (Python's documented protocol), instead of computing it again."""
    func.__signature__ = inspect.signature(func)  # type: ignore[attr-defined]
    return func


# A wildcard constraint that no value matches: the constraint of a wildcard with no allowed value (no system, no
# capture record), rather than a placeholder name that a folder could be given
NOTHING = "(?!)"


def one_of(patterns: Iterable[str]) -> str:
    """A wildcard constraint matching exactly one of ``patterns`` (regular expressions); :data:`NOTHING` for none."""
    return "|".join(patterns) or NOTHING


SLURM_EXECUTOR = "slurm"


def executor(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The executor this ``snakemake`` command line names (``--executor``/``-e``, else its ``--profile``'s
    ``executor:``, else ``$SNAKEMAKE_PROFILE``'s), as Snakemake's documented command line and profiles give it; None
    for the local one. Snakemake's workflow API does not say which executor runs the jobs: the Slurm hooks (the
    preflight, the states of unfinished runs) ask the command line. A profile named rather than given as a folder
    is looked up where Snakemake looks: $XDG_CONFIG_HOME/snakemake, ~/.config/snakemake, /etc/xdg/snakemake."""
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    named = _option(argv, "--executor", "-e")
    if named:
        return named
    profile = _option(argv, "--profile") or environ.get("SNAKEMAKE_PROFILE")
    return _profile_executor(profile, environ) if profile else None


def configfiles(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> list[Path]:
    """The config files this ``snakemake`` command line gives (``--configfile``/``--configfiles``, each followed by
    one or more paths, and its ``--profile``'s ``configfile``/``configfiles``), as Snakemake's documented command line
    and profiles give them; the Snakefile's own ``configfile:`` is the project's. The workflow API does not list
    them: the template check (mlrepro.config.refuse_templates) asks the command line."""
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    found: list[str] = []
    for i, arg in enumerate(argv):
        if arg in ("--configfile", "--configfiles"):
            for value in argv[i + 1:]:
                if value.startswith("-"):
                    break
                found.append(value)
        elif arg.startswith(("--configfile=", "--configfiles=")):
            found.append(arg.split("=", 1)[1])
    profile = _option(argv, "--profile") or environ.get("SNAKEMAKE_PROFILE")
    if profile:
        for key in ("configfile", "configfiles"):
            value = _profile_value(profile, environ, key)
            found += [str(v) for v in value] if isinstance(value, list) else [str(value)] if value else []
    return [Path(f) for f in found]


def _option(argv: list[str], *names: str) -> str | None:
    found = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                found = argv[i + 1]
            elif name.startswith("--") and arg.startswith(name + "="):
                found = arg.split("=", 1)[1]
    return found


def _profile_executor(profile: str, environ: Mapping[str, str]) -> str | None:
    value = _profile_value(profile, environ, "executor")
    return str(value) if value else None


def _profile_value(profile: str, environ: Mapping[str, str], key: str) -> Any:
    import yaml

    folders = [Path(profile)] if Path(profile).exists() else [
        Path(d) / "snakemake" / profile for d in (environ.get("XDG_CONFIG_HOME", ""), str(Path.home() / ".config"),
                                                  "/etc/xdg") if d]
    for folder in folders:
        # Snakemake 9 reads the file for the highest major version it is, then the plain one
        for name in ("config.v9+.yaml", "config.v8+.yaml", "config.yaml", "profile.yaml"):
            file = folder / name if folder.is_dir() else folder
            if file.is_file():
                data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
                return data.get(key) if isinstance(data, dict) else None
    return None


def utf8_paths(paths: list[str], root: Path) -> list[str]:
    """``paths`` as Snakemake can record them: it writes its inputs as UTF-8, so a name that is not UTF-8
    (os.fsdecode's surrogates) in an audited or reproduced package would stop it before any verdict. Such a path
    is replaced by its nearest folder with a UTF-8 name inside ``root`` (an added or removed entry still re-runs
    the step; the step itself reads the name and reports it escaped)."""
    out: dict[str, None] = {}
    for path in paths:
        p = Path(path)
        while not _utf8(str(p)) and p != root and root in p.parents:
            p = p.parent
        out[str(p)] = None
    return list(out)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
