"""``python -m mlrepro.audit {check,summarize} ...``: the audit's steps as ``rules/audit.smk`` runs them.

Shell jobs, not ``run:`` blocks: Snakemake spawns a ``run:`` job as a new Snakemake process that
parses the whole workflow (and lists the whole package) again, which costs more than the job.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

from mlrepro.audit import compare, discover
from mlrepro.core import versions


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
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    compare_after = args.step == "summarize" and args.compare_logging is not None
    if args.logging is not None:
        try:
            folder = versions.resolve(args.logging, args.ruleset)
        except versions.VersionError as e:
            parser.error(str(e))
        if not versions.isolated(folder):  # this interpreter never imports the version: a child does
            status = versions.run_isolated(folder, ["-m", "mlrepro.audit", *argv])
            sys.exit(status or (_compare(args) if compare_after else 0))
        compare_after = False  # the isolated child: its parent compares once it is done
    # The official tools log every line they check; the audit reports their findings instead.
    logging.basicConfig(level=logging.ERROR)
    max_bytes = int(args.max_file_mb * (1 << 20))
    # imported only here: under --logging, in the isolated interpreter, they load that version;
    # the check step imports the compliance engine alone (check.py)
    if args.step == "check":
        from mlrepro.audit import check

        versions.assert_isolated()
        doc = check.check_round(args.root, args.out / "checks.json", args.out / ".cache", args.usage, args.ruleset,
                                args.jobs, max_bytes, args.fast)
        print(f"audit: {len(doc['files'])} result files, {len(doc['checked'])} checked, the rest from the cache")
    else:
        from mlrepro.audit import pipeline, report, result_ids

        versions.assert_isolated()
        try:
            audit = pipeline.summarize(args.root, pipeline.load_json(args.out / "checks.json"), args.usage,
                                       args.ruleset, args.manifest_sha256, args.result_ids, max_bytes, args.jobs,
                                       args.fast,
                                       versions.later_releases(args.logging, args.ruleset) if args.logging else [])
        except result_ids.PublishedTableError as e:
            parser.error(str(e))
        audit["rules_changed"] = compare.PAGE if args.compare_logging is not None else None
        pipeline.write_summary(audit, args.out)
        report.write(audit, args.out / "report")
        print(f"audit: report in {args.out / 'report' / 'index.html'}")
        if compare_after:
            sys.exit(_compare(args))


def _compare(args: argparse.Namespace) -> int:
    """Audit the same package under the ``--compare-logging`` release into OUT/compare, then list the
    results whose verdicts differ (``compare``); the exit status of the first step that fails."""
    other = args.out / "compare"
    judge = [] if args.compare_logging == "installed" else ["--logging", str(args.compare_logging)]
    for step in ("check", "summarize"):
        status = subprocess.run([sys.executable, "-P", "-m", "mlrepro.audit", step, "--root", str(args.root), "--out",
                                 str(other), "--usage", args.usage, "--ruleset", args.ruleset, "--max-file-mb",
                                 repr(args.max_file_mb), "--jobs", str(args.jobs), *judge], check=False).returncode
        if status:
            return status
    diffs = compare.write(args.out / "audit.json", other / "audit.json", args.out, args.out / "report")
    print(f"audit: {len(diffs)} results judged differently by the second release ({args.out / 'rules_changed.csv'})")
    return 0


if __name__ == "__main__":
    main()
