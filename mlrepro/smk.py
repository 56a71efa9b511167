"""What the rule files ask of the running Snakemake that its API does not say plainly."""

from __future__ import annotations

from typing import Any


def dry_run(workflow: Any) -> bool:
    """True for ``snakemake -n``. While the Snakefile is parsed the executor is not yet known and
    ``workflow.dryrun`` is False even for -n; the output settings carry the flag."""
    return bool(workflow.dryrun or getattr(workflow.output_settings, "dryrun", False))
