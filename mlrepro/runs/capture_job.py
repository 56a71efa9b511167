"""The pipeline's capture job (rules/runs.smk ``capture``): ``python -m mlrepro.runs.capture_job``.

Sources one config file natively (mlrepro/runs/capture.py), checks every (system, benchmark) that reads it against
its variables (mlrepro.runs.implementation.unit_problems: the messages planning gives once the record exists), and
writes the record, atomically, only where nothing stops them: a failed check fails the job, and the next plan runs
it again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mlrepro.runs.capture import CaptureError, Record, source_native, write
from mlrepro.runs.implementation import unit_problems


def capture(config: Path, out: Path, checks: list[dict[str, Any]]) -> Record:
    """Source ``config``, check each unit of ``checks`` against its variables, write the record to ``out``;
    CaptureError with what to do where it cannot be sourced or a check fails (then nothing is written)."""
    record = source_native(config)
    problems = [line for check in checks for line in unit_problems(record.env, **check)]
    if problems:
        raise CaptureError("invalid configuration (config/config.yaml and --config):\n" + "\n".join(problems))
    write(record, out)
    return record


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.runs.capture_job", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, required=True, help="the config file to source")
    p.add_argument("--out", type=Path, required=True, help="the record to write")
    p.add_argument("--checks", default="[]",
                   help="JSON: the (system, benchmark) units that read it, each checked against its variables")
    args = p.parse_args(argv)
    try:
        record = capture(args.config, args.out, json.loads(args.checks))
    except CaptureError as e:
        sys.exit(f"error: {e}")
    print(f"{args.out}: {len(record.env)} variables of {args.config}" + (
        f", which sourced {', '.join(record.sourced)}" if record.sourced else ""))


if __name__ == "__main__":
    main()
