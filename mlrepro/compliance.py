"""The hard gate: one result file through the official MLCommons compliance checker.

Uses ``mlperf_logging.compliance_checker``'s own engine, exactly as its ``__main__`` does, and keeps
its messages verbatim.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
from contextlib import redirect_stdout
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlperf_logging.compliance_checker import mlp_compliance

from mlrepro import atomic, integrity


@dataclass
class Verdict:
    file: str
    usage: str
    ruleset: str
    valid: bool
    messages: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check(path: Path, usage: str, ruleset: str) -> Verdict:
    checker = mlp_compliance.make_checker(usage, ruleset, False, False)
    # The checker logs through the root logger and prints; keep both out of the pipeline's output.
    logging.getLogger().setLevel(logging.CRITICAL)
    with redirect_stdout(io.StringIO()):
        valid, *_ = mlp_compliance.main(str(path), f"{usage}_{ruleset}/common.yaml", checker)
    messages = [*checker.not_overwritable, *checker.overwritable.values()]
    warnings = [f"{key}: {msg}" for key, msg in checker.warnings.items()]
    return Verdict(str(path), usage, ruleset, bool(valid), [str(m) for m in messages], warnings)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.compliance", description=__doc__)
    p.add_argument("result", type=Path)
    p.add_argument("--usage", default="training")
    p.add_argument("--ruleset", required=True)
    p.add_argument("--out", type=Path, required=True, help="the verdict as JSON (written only when compliant)")
    p.add_argument("--run-json", type=Path, default=None,
                   help="the run's record: check the result against the sha256 it recorded first")
    args = p.parse_args(argv)
    if args.run_json and (problem := integrity.result_problem(args.result, args.run_json)):
        sys.exit(f"error: {problem}\nRestore the file, or delete its run folder to run it again.")
    verdict = check(args.result, args.usage, args.ruleset)
    if not verdict.valid:
        details = "\n".join(f"  {m}" for m in verdict.messages) or "  (the checker gave no message)"
        sys.exit(f"error: {args.result} fails the MLPerf compliance checker ({args.usage} {args.ruleset}):\n"
                 f"{details}\nRe-check by hand with: python -m mlperf_logging.compliance_checker "
                 f"--usage {args.usage} --ruleset {args.ruleset} {args.result}")
    atomic.write_json(args.out, asdict(verdict))


if __name__ == "__main__":
    main()
