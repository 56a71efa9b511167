"""What the rule files ask of the running Snakemake that its API does not say plainly."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar


def dry_run(workflow: Any) -> bool:
    """True for ``snakemake -n``. While the Snakefile is parsed the executor is not yet known and
    ``workflow.dryrun`` is False even for -n; the output settings carry the flag."""
    return bool(workflow.dryrun or getattr(workflow.output_settings, "dryrun", False))


def python_command() -> list[str]:
    """The interpreter running Snakemake, as the rules' shell commands start it (a venv need not be
    activated): an argument list, quoted element by element where a rule renders it (``{x:q}``). ``-P``: the
    working folder is not put first on sys.path, so that a folder there named like a package (an audited
    organisation called ``mlrepro``) never shadows the installed one."""
    return [sys.executable, "-P"]


F = TypeVar("F", bound=Callable[..., Any])


def signature_once(func: F) -> F:
    """``func`` with its signature recorded. Snakemake reads a rule's function's signature (``inspect``) at every
    job, to learn which of input, output, threads, ... it takes: at 900 runs, about 0.15 s of every invocation
    for each function of the run rule (benchmarks/planning_scale.py). Snakemake's own wrappers
    (snakemake.ioutils) record it once the same way."""
    from snakemake.common import get_function_params, overwrite_function_params

    overwrite_function_params(func, get_function_params(func))
    return func


def executes_jobs(workflow: Any) -> bool:
    """True once Snakemake executes the DAG for real: in the process that schedules jobs, or in a job's own
    Snakemake process on a cluster node (``workflow.is_main_process`` tells them apart).

    While the Snakefile is parsed, a run, ``-n``, ``--summary``, ``--dag``, ``--list-rules`` and ``--lint``
    look the same: Snakemake parses first and learns what it was asked to do afterwards (its DAG settings
    and executor are set after the parse). ``Workflow.execute`` alone sets the executor plugin, before it
    builds the DAG: asked from an input function (while the DAG is built), this tells a real run apart."""
    return workflow.executor_plugin is not None and not dry_run(workflow) and not workflow.touch


def targets(workflow: Any) -> list[str]:
    """The targets of this invocation (rule names or files); known once the DAG is built, empty before."""
    settings = getattr(workflow, "dag_settings", None)
    return [str(t) for t in (getattr(settings, "targets", None) or [])]


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
