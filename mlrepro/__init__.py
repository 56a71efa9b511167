"""mlrepro: a containerized reproducibility pipeline for MLPerf Training."""

import os
from pathlib import Path

__version__ = "0.1.0"

# Where this package is imported from: a checkout (editable install), or an installed wheel's site-packages.
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def _workflow_root() -> Path:
    """The checkout that holds the workflow (Snakefile, rules/, config/, minis/, containers/,
    report_templates/): $MLREPRO_WORKFLOW, else the checkout this package is imported from, else the
    working folder where it holds the workflow (an installed wheel run by the Snakefile of a checkout of the
    same version: Snakemake and its jobs run there). docs/developer.md, "Installed as a package"."""
    if os.environ.get("MLREPRO_WORKFLOW"):
        return Path(os.environ["MLREPRO_WORKFLOW"]).resolve()
    for candidate in (PACKAGE_ROOT, Path.cwd()):
        if (candidate / "Snakefile").is_file() and (candidate / "minis").is_dir():
            return candidate.resolve()
    return PACKAGE_ROOT  # no workflow here: what needs one fails naming the file it lacks


PROJECT_ROOT = _workflow_root()
