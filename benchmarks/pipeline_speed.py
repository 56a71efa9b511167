"""Wall time of the default pipeline from clean, of the no-op re-run, and per-run figures.

Usage: python benchmarks/pipeline_speed.py [--configfile FILE] [--repeat N] [--workdir DIR]

Prints, for each repetition: wall seconds of `snakemake --cores all` from an empty working folder,
wall seconds of the second (no-op) invocation; then over all runs of the last repetition: the
median and max time to train (run_start -> run_stop), the median and max wall time of a run job
(Snakemake's benchmark files: process start to exit), the largest peak RSS of a run, and the
per-benchmark median time to train.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def snakemake(workdir: Path, extra: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                    str(workdir), "--cores", "all", "--quiet", "all", *extra], check=True, cwd=REPO)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configfile", type=Path)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--workdir", type=Path, help="keep outputs here (default: a temporary folder)")
    args = p.parse_args()
    extra = ["--configfile", str(args.configfile.resolve())] if args.configfile else []
    base = args.workdir or Path(tempfile.mkdtemp(prefix="mlrepro-speed-"))
    walls, noops = [], []
    for i in range(args.repeat):
        workdir = base / f"rep{i}"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        walls.append(snakemake(workdir, extra))
        noops.append(snakemake(workdir, extra))
        print(f"repetition {i}: from clean {walls[-1]:.1f} s, no-op re-run {noops[-1]:.2f} s", flush=True)
    results = workdir / "results"
    runs = [json.loads(p.read_text()) for p in sorted(results.glob("runs/*/*/run.json"))]
    ttt = [r["time_to_train_ms"] / 1000 for r in runs]
    jobs = {}
    for tsv in (results / "pipeline_info" / "benchmarks").glob("run_*.tsv"):
        with tsv.open() as f:
            row = next(csv.DictReader(f, delimiter="\t"))
        jobs[tsv.stem] = (float(row["s"]), float(row["max_rss"]) if row["max_rss"] not in ("", "-", "NA") else 0.0)
    print(f"pipeline from clean: median {statistics.median(walls):.1f} s over {len(walls)}; "
          f"no-op re-run: median {statistics.median(noops):.2f} s")
    print(f"runs: {len(runs)}; time to train median {statistics.median(ttt):.2f} s, max {max(ttt):.2f} s")
    print(f"run job wall (incl. start-up): median {statistics.median(j[0] for j in jobs.values()):.2f} s, "
          f"max {max(j[0] for j in jobs.values()):.2f} s")
    print(f"peak RSS of one run (training process): max {max(r['peak_rss_mb'] for r in runs):.0f} MB; "
          f"of one run job (Snakemake's max_rss): max {max(j[1] for j in jobs.values()):.0f} MB")
    by_benchmark: dict[str, list[float]] = {}
    for r in runs:
        by_benchmark.setdefault(r["benchmark"], []).append(r["time_to_train_ms"] / 1000)
    for name, values in sorted(by_benchmark.items()):
        epochs = [r["epochs"] for r in runs if r["benchmark"] == name]
        ok = sum(r["status"] == "success" for r in runs if r["benchmark"] == name)
        median = statistics.median(values)
        print(f"  {name:9s} runs {len(values):3d}  converged {ok:3d}  median time to train {median:6.2f} s"
              f"  epochs median {statistics.median(epochs)}")


if __name__ == "__main__":
    main()
