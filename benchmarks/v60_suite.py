"""The v6.0 mini suite from clean against its budget (issue 35: at most 5 minutes on the 2-core machine).

Usage: python benchmarks/v60_suite.py [--repeat N] [--release DIR] [--full] [--workdir DIR] [--json OUT]

Each repeat: ``snakemake --cores all --configfile config/v6.0.yaml`` (``--full``: with config/v6.0-full.yaml,
all seven benchmarks, 56 runs, ``--keep-going``: the gate stops llama31_405b and deepseekv3_671b on the values
their open rules pin) in an empty folder, judged by the 6.0.0 release in ``--release`` (a folder of releases
named by tag; default: unpacked from ../shared/data/mlperf_logging_by_round.tar.xz). Per repeat: the wall time,
the 1-minute load before it, each benchmark's summed job time (Snakemake's benchmark files) and its runs'
epochs and final metrics, how many result files the compliance gate passed, and the package checker's verdict
and release. Figures are medians over the repeats; the JSON (default v60_suite.json) holds each repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.pipeline_speed import bench_seconds  # noqa: E402

BUDGET_S = 300.0
TAG = "6.0.0-rc6"
RELEASES = REPO.parent / "shared" / "data" / "mlperf_logging_by_round.tar.xz"


def unpack_release(dest: Path) -> Path:
    with tarfile.open(RELEASES) as tar:
        tar.extractall(dest, members=[m for m in tar.getmembers() if Path(m.name).parts[:1] == (TAG,)],
                       filter="data")
    return dest


def suite(workdir: Path, release: Path, full: bool) -> dict[str, Any]:
    configs = ["config/v6.0.yaml", *(["config/v6.0-full.yaml"] if full else [])]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                           str(workdir), "--cores", "all", "--quiet", "all", "--configfile", *configs,
                           "--config", f"logging_release={release}", *(["--keep-going"] if full else [])],
                          cwd=REPO, check=False)
    wall = time.perf_counter() - start
    out = workdir / "results-v6.0"
    benchmarks: dict[str, dict[str, Any]] = {}
    for record_file in sorted(out.glob("runs/*/*/*/run.json")):
        record = json.loads(record_file.read_text())
        bm = benchmarks.setdefault(record["benchmark"], {"runs": [], "job_s": 0.0, "gate_passed": 0})
        bm["runs"].append({"status": record["status"], "epochs": record["epochs"],
                           "final_metric": record["final_metric"]})
        system, benchmark, index = record_file.parts[-4:-1]
        bench = out / "pipeline_info" / "benchmarks" / f"run_{system}_{benchmark}_{index}.tsv"
        bm["job_s"] += bench_seconds(bench) if bench.exists() else 0.0
        bm["gate_passed"] += (out / "compliance" / system / benchmark / f"{index}.json").exists()
    verdict_file = out / "package_check.json"
    package = json.loads(verdict_file.read_text()) if verdict_file.exists() else {}
    return {"wall_s": wall, "exit": proc.returncode, "load_1min_before": load, "benchmarks": benchmarks,
            "package_valid": package.get("valid"), "package_errors": package.get("errors"),
            "judged_by": package.get("judged_by"),
            "runs": sum(len(b["runs"]) for b in benchmarks.values()),
            "converged": sum(r["status"] == "success" for b in benchmarks.values() for r in b["runs"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--release", type=Path, help="a folder of mlperf-logging releases named by tag (with 6.0.0-rc6)")
    p.add_argument("--full", action="store_true", help="all seven benchmarks (config/v6.0-full.yaml), 56 runs")
    p.add_argument("--workdir", type=Path, help="keep the outputs here (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=Path("v60_suite.json"))
    args = p.parse_args()
    base = args.workdir or Path(tempfile.mkdtemp(prefix="mlrepro-v60-"))
    release = (args.release or unpack_release(base / "releases")).resolve()
    rows = []
    for i in range(args.repeat):
        workdir = base / f"suite{i}"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        row = suite(workdir, release, args.full)
        rows.append(row)
        per = ", ".join(f"{b} {v['job_s']:.0f} s" for b, v in row["benchmarks"].items())
        print(f"repeat {i}: {row['wall_s']:.1f} s from clean (exit {row['exit']}, load {row['load_1min_before']:.2f} "
              f"before); {row['converged']}/{row['runs']} runs converged; package checker "
              f"{'found no errors' if row['package_valid'] else 'found errors'} ({row['judged_by']}); "
              f"job time: {per}", flush=True)
    summary = {"repeat": args.repeat, "cores": os.cpu_count(), "budget_s": BUDGET_S, "full": args.full,
               "wall_s": [r["wall_s"] for r in rows], "wall_s_median": statistics.median(r["wall_s"] for r in rows),
               "load_1min_before": [r["load_1min_before"] for r in rows], "rows": rows}
    args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"v6.0 suite from clean: median {summary['wall_s_median']:.1f} s (budget {BUDGET_S:.0f} s) over "
          f"{args.repeat}; {os.cpu_count()} cores; load before {summary['load_1min_before']}; wrote {args.json}")
    ok = summary["wall_s_median"] <= BUDGET_S and all(r["exit"] == 0 or args.full for r in rows)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
