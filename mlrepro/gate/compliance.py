"""The hard gate: one result file through the official MLCommons compliance checker, as it ships.

Runs ``mlperf_logging.compliance_checker``'s own parser, engine and rules, as its ``__main__`` does,
unpatched (``mlrepro.core.checker``; only the file's split into lines avoids the official
``re.sub``'s quadratic time on a huge line, with the same lines), and keeps its messages verbatim.
The audit's fast paths are never used here: the gate's verdicts equal the unpatched checker's on
every result file of the public v1.1 round (tests/test_gate_round.py).

Interface: ``check(path, usage, ruleset) -> Verdict``; the compliance rule's job (:func:`job`) and ``python -m
mlrepro.gate.compliance RESULT --ruleset R [--usage U] --out VERDICT.json [--run-json RUN.json] [--logging-release
DIR]`` (exit 1 and the checker's messages on a failing file; the verdict written only when compliant).
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
from contextlib import redirect_stdout
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlrepro.core import atomic, integrity, releases, versions
from mlrepro.core.job import Job


@dataclass
class Verdict:
    file: str
    usage: str
    ruleset: str
    valid: bool
    messages: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    judged_by: str = ""  # the mlperf-logging release whose checker gave the verdict


def check(path: Path, usage: str, ruleset: str) -> Verdict:
    # imported here: a gate that hands over to a release's own interpreter (--logging-release) never loads them
    from mlperf_logging.compliance_checker import mlp_compliance

    from mlrepro.core import checker

    official = mlp_compliance.make_checker(usage, ruleset, False, False)
    # The checker logs through the root logger and prints; keep both out of the pipeline's output.
    logging.getLogger().setLevel(logging.CRITICAL)
    try:
        # ComplianceChecker.check_file: the official parse of the file's lines, then its checks
        lines = checker.log_lines(path.read_bytes(), ruleset)
        with redirect_stdout(io.StringIO()):
            loglines, failed = checker.parse(lines, ruleset)
            valid = checker.run_checker(official, loglines, failed, usage, ruleset)
    except Exception as e:  # e.g. a JSON line without "key": the official checker dies of it
        return Verdict(str(path), usage, ruleset, False,
                       [_cut(f"the official checker crashes on this file: {type(e).__name__}: {e}")])
    messages = [*official.not_overwritable, *official.overwritable.values()]
    warnings = [f"{key}: {msg}" for key, msg in official.warnings.items()]
    return Verdict(str(path), usage, ruleset, bool(valid), [_cut(str(m)) for m in messages],
                   [_cut(w) for w in warnings], versions.label())


# A message can quote a log line, and a hostile line can be megabytes long.
MAX_MESSAGE = 2_000


def _cut(text: str) -> str:
    if len(text) <= MAX_MESSAGE:
        return text
    return text[:MAX_MESSAGE] + f" [... shortened: {len(text)} characters in all]"


def gate(result: Path, usage: str, ruleset: str, out: Path, run_json: Path | None, release: Path | None,
         again: tuple[list[str], str | None]) -> None:
    """Judge ``result``; write its verdict to ``out`` only when it is compliant, exit 1 with the checker's messages
    otherwise. ``release``: the mlperf-logging release that judges, in an interpreter isolated under it, which runs
    ``python again[0]`` with ``again[1]`` on its standard input (this same step)."""
    if release and not versions.isolated(release):  # a child judges with that release (a cached one verified first)
        releases.checked(release)
        sys.exit(versions.run_isolated(release, *again))
    versions.assert_isolated()
    if run_json and (problem := integrity.result_problem(result, run_json)):
        sys.exit(f"error: {problem}\nRestore the file, or delete its run folder to run it again.")
    verdict = check(result, usage, ruleset)
    if not verdict.valid:
        details = "\n".join(f"  {m}" for m in verdict.messages) or "  (the checker gave no message)"
        sys.exit(f"error: {result} fails the MLPerf compliance checker ({usage} {ruleset}):\n"
                 f"{details}\nRe-check by hand with: python -m mlperf_logging.compliance_checker "
                 f"--usage {usage} --ruleset {ruleset} {result}"
                 + (f" (with PYTHONPATH={release})" if release else ""))
    atomic.write_json(out, asdict(verdict))


def job(job: Job) -> None:
    """rules/compliance.smk: input result (and summary: its run's record), params usage, ruleset and release (the
    judging release's folder, or none: the installed one)."""
    gate(job.input["result"], job.params["usage"], job.params["ruleset"], job.output.first, job.input.get("summary"),
         Path(job.params["release"]) if job.params["release"] else None, (["-m", "mlrepro.jobs"], job.to_json()))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.gate.compliance", description=__doc__)
    p.add_argument("result", type=Path)
    p.add_argument("--usage", default="training")
    p.add_argument("--ruleset", required=True)
    p.add_argument("--out", type=Path, required=True, help="the verdict as JSON (written only when compliant)")
    p.add_argument("--run-json", type=Path, default=None,
                   help="the run's record: check the result against the sha256 it recorded first")
    p.add_argument("--logging-release", type=Path, default=None,
                   help="the folder of the mlperf-logging release that judges (run isolated under it; "
                   "default: the installed one)")
    args = p.parse_args(argv)
    gate(args.result, args.usage, args.ruleset, args.out, args.run_json, args.logging_release,
         (["-m", "mlrepro.gate.compliance", *(sys.argv[1:] if argv is None else argv)], None))


if __name__ == "__main__":
    main()
