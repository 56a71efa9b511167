"""The embedded default from clean against its budget (issue 24: within 4 minutes on the 2-core machine), and
the inference stage's share of it.

Usage: python benchmarks/default_budget.py [--pairs N] [--workdir DIR] [--json OUT]

Per pair, from an empty folder each: ``snakemake --cores all`` (the README's main job, every stage), then the
same without the inference stage (``inference.benchmarks: []``); the order alternates between pairs. The
inference stage's share is given two ways: its jobs' time (Snakemake's benchmark files: each job's wall time)
against every job's, and what the wall time of the whole grows by with the stage (both runs of a pair on the
same machine state). Figures are medians over the pairs; the JSON (default: default_budget.json) holds each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.pipeline_speed import bench_seconds, snakemake  # noqa: E402

BUDGET_S = 240.0
VARIANTS = {"default": [], "without_inference": ["--config", "inference={'benchmarks': []}"]}


def job_seconds(results: Path) -> dict[str, float]:
    """Summed job wall time by stage: inference jobs (``inference_*``) and all others."""
    sums = {"inference": 0.0, "other": 0.0}
    for tsv in (results / "pipeline_info" / "benchmarks").glob("*.tsv"):
        sums["inference" if tsv.name.startswith("inference") else "other"] += bench_seconds(tsv)
    return sums


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--workdir", type=Path, help="keep the outputs here (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=Path("default_budget.json"))
    args = p.parse_args()
    base = args.workdir or Path(tempfile.mkdtemp(prefix="mlrepro-budget-"))
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for i in range(args.pairs):
        order = list(VARIANTS) if i % 2 == 0 else list(VARIANTS)[::-1]
        for variant in order:
            workdir = base / f"{variant}{i}"
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
            load = os.getloadavg()[0]
            wall = snakemake(REPO / "Snakefile", workdir, VARIANTS[variant])
            jobs = job_seconds(workdir / "results")
            rows[variant].append({"wall_s": wall, "load_1min_before": load, "job_s": jobs})
            print(f"pair {i} {variant}: {wall:.1f} s from clean; job time: inference {jobs['inference']:.1f} s, "
                  f"other {jobs['other']:.1f} s (load {load:.2f} before)", flush=True)
    full, bare = rows["default"], rows["without_inference"]
    inference_job = [r["job_s"]["inference"] for r in full]
    all_job = [r["job_s"]["inference"] + r["job_s"]["other"] for r in full]
    shares = [a / b for a, b in zip(inference_job, all_job, strict=True)]
    added = [f["wall_s"] - b["wall_s"] for f, b in zip(full, bare, strict=True)]
    summary = {
        "pairs": args.pairs, "cores": os.cpu_count(), "budget_s": BUDGET_S,
        "default_wall_s": [r["wall_s"] for r in full],
        "default_wall_s_median": statistics.median(r["wall_s"] for r in full),
        "without_inference_wall_s": [r["wall_s"] for r in bare],
        "without_inference_wall_s_median": statistics.median(r["wall_s"] for r in bare),
        "inference_job_s_median": statistics.median(inference_job),
        "inference_share_of_job_time_median": statistics.median(shares),
        "inference_wall_added_s_median": statistics.median(added),
        "rows": rows,
    }
    summary["inference_share_of_wall_median"] = (summary["inference_wall_added_s_median"]
                                                 / summary["default_wall_s_median"])
    args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"default from clean: median {summary['default_wall_s_median']:.1f} s (budget {BUDGET_S:.0f} s) over "
          f"{args.pairs}; without the inference stage {summary['without_inference_wall_s_median']:.1f} s; the stage "
          f"adds {summary['inference_wall_added_s_median']:.1f} s of wall time "
          f"({summary['inference_share_of_wall_median']:.0%}) and is "
          f"{summary['inference_share_of_job_time_median']:.0%} of the job time "
          f"({summary['inference_job_s_median']:.1f} s); {os.cpu_count()} cores; wrote {args.json}")
    sys.exit(0 if summary["default_wall_s_median"] <= BUDGET_S else 1)


if __name__ == "__main__":
    main()
