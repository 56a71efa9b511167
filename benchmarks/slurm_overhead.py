"""Slurm's per-job overhead on a finished `snakemake --profile profiles/slurm` working folder.

    .venv/bin/python benchmarks/slurm_overhead.py WORKDIR [WORKDIR ...]

For every Slurm job of the workflow (sacct, matched by the plugin's job comment ``rule_<rule>[_wildcards_..]``
and the job's working directory) it prints the queue wait (Start - Submit), the job's elapsed time, the rule's
own time inside it (Snakemake's benchmark file, pipeline_info/benchmarks/<rule>_<wildcards>.tsv), and their
difference: what a Slurm job costs beyond its command (the job step's snakemake start, srun, accounting).
Medians over all jobs at the end.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
from datetime import datetime
from pathlib import Path


def seconds(elapsed: str) -> float:
    days, _, hms = elapsed.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return (int(days or 0) * 86400) + h * 3600 + m * 60 + s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workdirs", type=Path, nargs="+")
    args = p.parse_args()
    rows = subprocess.run(["sacct", "-X", "-P", "-n", "-a", "-S", "now-7days", "-o",
                           "JobIDRaw,Comment,WorkDir,Submit,Start,Elapsed,State"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    waits, extras = [], []
    print(f"{'job':>6} {'rule':40} {'wait s':>7} {'job s':>7} {'rule s':>7} {'overhead s':>10} state")
    for row in rows:
        job, comment, workdir, submit, start, elapsed, state = row.split("|")
        wd = next((w for w in args.workdirs if str(w.resolve()) == workdir), None)
        if wd is None or not comment.startswith("rule_"):
            continue
        name = comment.removeprefix("rule_").replace("_wildcards_", "_")
        tsv = next(iter(wd.glob(f"*/pipeline_info/benchmarks/{name}.tsv")), None)
        inner = float(next(csv.DictReader(tsv.open(), delimiter="\t"))["s"]) if tsv else None
        wait = (datetime.fromisoformat(start) - datetime.fromisoformat(submit)).total_seconds()
        total = seconds(elapsed)
        waits.append(wait)
        if inner is not None and state == "COMPLETED":
            extras.append(total - inner)
        print(f"{job:>6} {name:40} {wait:7.0f} {total:7.0f} {inner if inner is not None else float('nan'):7.1f} "
              f"{total - inner if inner is not None else float('nan'):10.1f} {state}")
    if waits:
        print(f"median queue wait {statistics.median(waits):.1f} s over {len(waits)} jobs")
    if extras:
        print(f"median overhead per job beyond its command {statistics.median(extras):.1f} s "
              f"(sacct Elapsed has 1 s resolution)")


if __name__ == "__main__":
    main()
