"""``python -m mlrepro.audit {check,summarize} ...``: the audit's steps as ``rules/audit.smk`` runs them.

Shell jobs, not ``run:`` blocks: Snakemake spawns a ``run:`` job as a new Snakemake process that
parses the whole workflow (and lists the whole package) again, which costs more than the job.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from mlrepro.audit import discover, pipeline, report, result_ids


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
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes of the check")
    args = parser.parse_args(argv)
    # The official tools log every line they check; the audit reports their findings instead.
    logging.basicConfig(level=logging.ERROR)
    max_bytes = int(args.max_file_mb * (1 << 20))
    if args.step == "check":
        doc = pipeline.check(args.root, args.out / "checks.json", args.out / ".cache", args.usage, args.ruleset,
                             args.jobs, max_bytes)
        print(f"audit: {len(doc['files'])} result files, {len(doc['checked'])} checked, the rest from the cache")
    else:
        try:
            audit = pipeline.summarize(args.root, pipeline.load_json(args.out / "checks.json"), args.usage,
                                       args.ruleset, args.manifest_sha256, args.result_ids, max_bytes)
        except result_ids.PublishedTableError as e:
            parser.error(str(e))
        pipeline.write_summary(audit, args.out)
        report.write(audit, args.out / "report")
        print(f"audit: report in {args.out / 'report' / 'index.html'}")


if __name__ == "__main__":
    main()
