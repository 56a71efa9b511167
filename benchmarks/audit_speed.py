"""Audit speed on the whole public Training v1.1 round: mlrepro's audit vs the official summarizer.

    .venv/bin/python benchmarks/audit_speed.py [--archive PATH] [--jobs N] [--orgs A,B]

Both sides run on fresh copies of the round, in this one run of the script, as subprocesses:
mlrepro's audit (verdicts of every file with a cold cache, then package verdicts, scores, summary
and report) and the official ``result_summarizer`` over each organisation in turn (what a reviewer
runs; it checks every file and scores every system). Prints wall and CPU seconds of both, the
ratio, and whether every score the official summarizer prints equals the audit's to 1e-9 minutes.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO.parent / "shared" / "data" / "mlperf_training_results_v1.1.tar.xz"
BENCHMARKS = ("bert", "dlrm", "maskrcnn", "minigo", "resnet", "ssd", "rnnt", "unet3d")


def timed(commands: list[list[str]], cwd: Path) -> tuple[float, float]:
    """Run ``commands`` one after the other: (wall seconds, CPU seconds of the children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    for cmd in commands:
        subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def scores_from_csv(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {row["details_url"]: row for row in csv.DictReader(f)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path, default=ARCHIVE)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--orgs", help="comma-separated organisations (default: all)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="audit-speed-") as tmp_name:
        tmp = Path(tmp_name)
        with tarfile.open(args.archive) as tar:
            tar.extractall(tmp / "ours", filter="data")
            tar.extractall(tmp / "official", filter="data")  # the official tools write into their input
        orgs = sorted(p.name for p in (tmp / "official").iterdir() if p.is_dir())
        if args.orgs:
            keep = set(args.orgs.split(","))
            orgs = [o for o in orgs if o in keep]
            for side in ("ours", "official"):
                for p in (tmp / side).iterdir():
                    if p.name not in keep:
                        subprocess.run(["rm", "-rf", str(p)], check=True)

        audit = [py, "-m", "mlrepro.audit"]
        common = ["--root", str(tmp / "ours"), "--out", str(tmp / "out"), "--ruleset", "1.1.0"]
        ours_wall, ours_cpu = timed([[*audit, "check", *common, "--jobs", str(args.jobs)],
                                     [*audit, "summarize", *common]], REPO)
        print(f"audit: {ours_wall:.1f} s wall, {ours_cpu:.1f} s CPU; now the official summarizer...",
              file=sys.stderr, flush=True)
        official_wall, official_cpu = timed(
            [[py, "-m", "mlperf_logging.result_summarizer", org, "training", "1.1.0", "-csv", str(tmp / f"{org}.csv")]
             for org in orgs], tmp / "official")

        ours = scores_from_csv(tmp / "out" / "summary.csv")
        compared, differ = 0, []
        for org in orgs:
            for url, row in scores_from_csv(tmp / f"{org}.csv").items():
                for b in BENCHMARKS:
                    theirs, mine = row[b], ours[url][b]
                    if theirs == "" and mine == "":
                        continue
                    compared += 1
                    if theirs == "" or mine == "" or not math.isclose(float(theirs), float(mine), rel_tol=0,
                                                                      abs_tol=1e-9):
                        differ.append(f"{url} {b}: official {theirs!r}, audit {mine!r}")
        files = len(json.loads((tmp / "out" / "checks.json").read_text())["files"])

    figures = {"organisations": len(orgs), "result_files": files, "jobs": args.jobs,
               "audit_wall_s": round(ours_wall, 1), "audit_cpu_s": round(ours_cpu, 1),
               "official_wall_s": round(official_wall, 1), "official_cpu_s": round(official_cpu, 1),
               "wall_ratio": round(official_wall / ours_wall, 2), "cpu_ratio": round(official_cpu / ours_cpu, 2),
               "scores_compared": compared, "scores_differing": len(differ)}
    print(json.dumps(figures, indent=2))
    for line in differ[:20]:
        print("DIFFERS:", line)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
