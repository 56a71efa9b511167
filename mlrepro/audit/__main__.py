"""``python -m mlrepro.audit {check,summarize} ...``: the audit's steps (mlrepro/audit/steps.py), as rules/audit.smk
runs them, by hand."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mlrepro.audit import discover
from mlrepro.audit.steps import Step, StepError, run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mlrepro.audit", description=__doc__)
    parser.add_argument("step", choices=["check", "summarize"])
    parser.add_argument("--root", type=Path, required=True, help="the package: one organisation or a round")
    parser.add_argument("--out", type=Path, required=True, help="the audit's output folder")
    parser.add_argument("--usage", default="training")
    parser.add_argument("--ruleset", required=True)
    parser.add_argument("--manifest-sha256", default=None,
                        help="the provenance manifest's sha256 published with the package (its report)")
    parser.add_argument("--result-ids", type=Path, default=None,
                        help="the round's published result IDs (CSV: org,system,id); they win over the derived ones")
    parser.add_argument("--max-file-mb", type=float, default=discover.DEFAULT_MAX_FILE_MB,
                        help="a larger entry is not read; it gets its own verdict")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes of the check (and of a release's own tools)")
    parser.add_argument("--logging", type=Path, default=None,
                        help="the mlperf-logging that judges: one version's folder, or a folder of them by tag "
                             "(default: the installed release)")
    parser.add_argument("--compare-logging", default=None,
                        help="summarize: judge by a second release too (a folder as --logging, or 'installed') and "
                             "list where the verdicts differ (rules_changed.json/.csv/.html)")
    parser.add_argument("--no-fast-paths", dest="fast", action="store_false",
                        help="check with mlperf_logging's compliance checker exactly as it ships (slower): without "
                             "the engine's fast paths (mlrepro/audit/fastpath.py)")
    args = parser.parse_args(argv)
    try:
        sys.exit(run(Step(**vars(args))))
    except StepError as e:
        parser.error(str(e))


if __name__ == "__main__":
    main()
