"""Wall time of the pipeline from clean on today's launch path (cold: one interpreter per run) and the
warm one (runs forked from one warm parent, mlrepro/runs/warm.py), alternating on the same config; the
per-run fixed cost, the no-op re-run and a bare Snakefile's no-op with as many jobs and files.

Usage: python benchmarks/pipeline_speed.py [--configfile FILE] [--pairs N] [--workdir DIR] [--json OUT]
                                          [--start-with cold|warm]

Per pair: `snakemake --cores all` from an empty folder with `warm_start=false`, then with
`warm_start=true` (the order alternates between pairs), each followed by a no-op re-run; then the bare
Snakefile's no-op, and that of a one-job Snakefile (Snakemake's own floor on this machine). Per run: the
fixed cost is the run job's wall time (Snakemake's benchmark file: process start to exit) minus its
time to train (MLLOG run_start..run_stop). Same seeds must give the same epochs and metrics on both
paths: the script compares them and says so.
Figures are medians over the pairs; the JSON (default: pipeline_speed.json) holds every figure.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODES = {"cold": "warm_start=False", "warm": "warm_start=True"}  # Snakemake parses True/False only


def snakemake(snakefile: Path, workdir: Path, extra: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(workdir),
                    "--cores", "all", "--quiet", "all", *extra], check=True, cwd=REPO)
    return time.perf_counter() - start


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def bench_seconds(tsv: Path) -> float:
    """A job's wall time, from its Snakemake benchmark file."""
    with tsv.open() as f:
        return float(next(csv.DictReader(f, delimiter="\t"))["s"])


def run_figures(workdir: Path) -> dict[str, Any]:
    results = workdir / "results"
    runs: dict[str, dict[str, Any]] = {}
    fixed = []
    for path in sorted(results.glob("runs/*/*/*/run.json")):  # runs/<system>/<benchmark>/<i>/
        record = json.loads(path.read_text())
        name = f"run_{path.parent.parent.parent.name}_{record['benchmark']}_{path.parent.name}"
        job_s = bench_seconds(results / "pipeline_info" / "benchmarks" / f"{name}.tsv")
        train_s = (record["run_stop_ms"] - record["run_start_ms"]) / 1000
        fixed.append(job_s - train_s)
        runs[name] = {"seed": record["seed"], "epochs": record["epochs"], "status": record["status"],
                      "final_metric": record["final_metric"], "metrics": [m["value"] for m in record["metrics"]],
                      "job_s": job_s, "train_s": train_s}
    return {"runs": runs, "fixed_cost_median_s": statistics.median(fixed), "fixed_cost_p90_s": p90(fixed),
            "job_s_sum": sum(r["job_s"] for r in runs.values()),
            "train_s_sum": sum(r["train_s"] for r in runs.values())}


def job_count(extra: list[str], empty: Path) -> int:
    """The jobs of a run from clean: the dry run's job table in an empty folder."""
    shutil.rmtree(empty, ignore_errors=True)
    empty.mkdir()
    out = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                          str(empty), "--cores", "all", "-n", "--quiet", "rules", *extra], check=True, cwd=REPO,
                         capture_output=True, text=True).stdout
    return next(int(line.split()[1]) for line in out.splitlines() if line.startswith("total"))


def bare_snakefile(folder: Path, jobs: int, files: int) -> Path:
    """A Snakefile of ``jobs`` trivial jobs writing ``files`` files in all: what Snakemake alone costs."""
    per_job = max(1, math.ceil(files / jobs))
    snakefile = folder / "Snakefile"
    snakefile.write_text(
        f"rule all:\n    input: expand('out/{{i}}/{{k}}.txt', i=range({jobs}), k=range({per_job}))\n\n"
        f"rule make:\n    output: expand('out/{{{{i}}}}/{{k}}.txt', k=range({per_job}))\n"
        "    shell: 'for f in {output:q}; do echo x > \"$f\"; done'\n")
    return snakefile


def bare_noop(folder: Path, jobs: int, files: int) -> list[float]:
    """Three no-op re-runs of a bare Snakefile, after one run from clean."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    snakefile = bare_snakefile(folder, jobs, files)
    snakemake(snakefile, folder, [])
    return [snakemake(snakefile, folder, []) for _ in range(3)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configfile", type=Path)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--workdir", type=Path, help="keep outputs here (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=Path("pipeline_speed.json"))
    p.add_argument("--start-with", choices=list(MODES), default="cold", help="the first pair's first path")
    args = p.parse_args()
    extra = ["--configfile", str(args.configfile.resolve())] if args.configfile else []
    base = args.workdir or Path(tempfile.mkdtemp(prefix="mlrepro-speed-"))
    figures: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for i in range(args.pairs):
        first = list(MODES) if args.start_with == "cold" else list(MODES)[::-1]
        for mode in first if i % 2 == 0 else first[::-1]:
            workdir = base / f"{mode}{i}"
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
            wall = snakemake(REPO / "Snakefile", workdir, [*extra, "--config", MODES[mode]])
            noop = snakemake(REPO / "Snakefile", workdir, [*extra, "--config", MODES[mode]])
            figures[mode].append({"wall_s": wall, "noop_s": noop, **run_figures(workdir)})
            print(f"pair {i} {mode}: from clean {wall:.1f} s, no-op {noop:.2f} s, per-run fixed cost median "
                  f"{figures[mode][-1]['fixed_cost_median_s']:.2f} s", flush=True)
    last = base / f"warm{args.pairs - 1}"
    jobs = job_count(extra, base / "plan")
    # the pipeline's files, not Snakemake's own records of them (.snakemake/), which the bare one keeps too
    files = sum(1 for f in last.rglob("*") if f.is_file() and ".snakemake" not in f.relative_to(last).parts)
    bare_noops = bare_noop(base / "bare", jobs, files)
    # Snakemake's own floor here: start, parse and a no-op with one job and one file
    floor_noops = bare_noop(base / "bare1", 1, 1)

    cores = os.cpu_count() or 1

    # same seeds, same epochs and metrics on both paths
    reference = figures["cold"][0]["runs"]
    same = all({k: (r["seed"], r["epochs"], r["status"], r["final_metric"], r["metrics"]) for k, r in f["runs"].items()}
               == {k: (r["seed"], r["epochs"], r["status"], r["final_metric"], r["metrics"])
                   for k, r in reference.items()} for mode in MODES for f in figures[mode])
    summary: dict[str, Any] = {"config": str(args.configfile or "config/config.yaml"), "pairs": args.pairs,
                               "runs": len(reference), "same_epochs_and_metrics": same,
                               "bare_snakefile": {"jobs": jobs, "files": files,
                                                  "noop_s_median": statistics.median(bare_noops)},
                               "snakemake_floor_noop_s_median": statistics.median(floor_noops),
                               "cores": cores}
    for mode in MODES:
        rows = figures[mode]
        summary[mode] = {
            "wall_s_median": statistics.median(r["wall_s"] for r in rows), "wall_s": [r["wall_s"] for r in rows],
            "noop_s_median": statistics.median(r["noop_s"] for r in rows),
            "fixed_cost_median_s": statistics.median(r["fixed_cost_median_s"] for r in rows),
            "fixed_cost_p90_s": statistics.median(r["fixed_cost_p90_s"] for r in rows),
            "job_s_sum_median": statistics.median(r["job_s_sum"] for r in rows),
            "train_s_sum_median": statistics.median(r["train_s_sum"] for r in rows),
        }
        # the least wall time the training alone could take on this machine's cores, each run on one
        # (threads_per_run: 1, the default)
        summary[mode]["train_floor_s"] = summary[mode]["train_s_sum_median"] / cores
    summary["wall_ratio_warm_to_cold"] = summary["warm"]["wall_s_median"] / summary["cold"]["wall_s_median"]
    summary["noop_ratio_to_bare"] = summary["warm"]["noop_s_median"] / summary["bare_snakefile"]["noop_s_median"]
    args.json.write_text(json.dumps(summary, indent=1) + "\n")
    for mode in MODES:
        s = summary[mode]
        print(f"{mode}: wall median {s['wall_s_median']:.1f} s, fixed cost per run median "
              f"{s['fixed_cost_median_s']:.2f} s p90 {s['fixed_cost_p90_s']:.2f} s, no-op {s['noop_s_median']:.2f} s")
    print(f"warm/cold wall {summary['wall_ratio_warm_to_cold']:.2f}; bare Snakefile no-op "
          f"{summary['bare_snakefile']['noop_s_median']:.2f} s ({jobs} jobs, {files} files), ratio "
          f"{summary['noop_ratio_to_bare']:.2f}; a one-job Snakefile's no-op "
          f"{summary['snakemake_floor_noop_s_median']:.2f} s; same epochs and metrics on both paths: {same}; "
          f"wrote {args.json}")


if __name__ == "__main__":
    main()
