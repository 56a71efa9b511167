"""What the rule files ask of the running Snakemake that its API does not say plainly."""

from __future__ import annotations

import shlex
import sys
from typing import Any


def dry_run(workflow: Any) -> bool:
    """True for ``snakemake -n``. While the Snakefile is parsed the executor is not yet known and
    ``workflow.dryrun`` is False even for -n; the output settings carry the flag."""
    return bool(workflow.dryrun or getattr(workflow.output_settings, "dryrun", False))


def python_command() -> str:
    """The interpreter running Snakemake, as the rules' shell commands start it (a venv need not be
    activated). ``-P``: the working folder is not put first on sys.path, so that a folder there named like
    a package (an audited organisation called ``mlrepro``) never shadows the installed one."""
    return shlex.join([sys.executable, "-P"])
