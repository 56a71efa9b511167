"""The v6.0 mini suite from clean against its budget (issue 35: at most 5 minutes on the 2-core machine).

Usage: python benchmarks/v60_suite.py [--repeat N] [--release DIR] [--full] [--workdir DIR] [--json OUT]

Each repeat: ``snakemake --cores all --configfile config/v6.0.yaml`` (its five benchmarks, 50 runs; ``--full``:
with config/v6.0-full.yaml, all seven, 56 runs, ``--keep-going``: the gate stops llama31_405b and deepseekv3_671b
on the values their open rules pin) in an empty folder, judged by the 6.0.0 release in ``--release`` (a folder of
releases named by tag; default: unpacked from ../shared/data/mlperf_logging_by_round.tar.xz). Per repeat: the wall
time; the CPU time (user + sys) of everything the invocation started, the warm start's detached parents included
(this process is their subreaper), which load stretches far less than wall time; the 1-minute load before and
after; per benchmark its runs' summed job time (Snakemake's benchmark files), each run's status, epochs and final
metric, how many result files the compliance gate passed and the keys it failed on; the runs that started cold
(no warm start: each then pays the import of torch, seconds of CPU; the run logs say why); and the package
checker's verdict and release. Figures are medians over the repeats; the JSON (default v60_suite.json) holds each
repeat.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.pipeline_speed import bench_seconds  # noqa: E402

BUDGET_S = 300.0
TAG = "6.0.0-rc6"
RELEASES = REPO.parent / "shared" / "data" / "mlperf_logging_by_round.tar.xz"
PR_SET_CHILD_SUBREAPER = 36
COLD = "mlrepro.runs.warm: cold start: "


def unpack_release(dest: Path) -> Path:
    with tarfile.open(RELEASES) as tar:
        tar.extractall(dest, members=[m for m in tar.getmembers() if Path(m.name).parts[:1] == (TAG,)],
                       filter="data")
    return dest


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reap_orphans() -> None:
    """Wait for what the invocation left running (the warm parents end within a second of their owner)."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def gate_failures(log: Path) -> list[str]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return sorted(set(re.findall(r"CHECK for '(\w+)' failed", text)))


def suite(workdir: Path, release: Path, full: bool) -> dict[str, Any]:
    configs = ["config/v6.0.yaml", *(["config/v6.0-full.yaml"] if full else [])]
    load = os.getloadavg()[0]
    cpu, start = children_cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                           str(workdir), "--cores", "all", "--quiet", "all", "--configfile", *configs,
                           "--config", f"logging_release={release}", *(["--keep-going"] if full else [])],
                          cwd=REPO, check=False)
    wall = time.perf_counter() - start
    reap_orphans()
    cpu = children_cpu() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "exit": proc.returncode, "load_1min_before": load,
            "load_1min_after": os.getloadavg()[0], **collect(workdir / "results-v6.0")}


def collect(out: Path) -> dict[str, Any]:
    """What a suite's outputs in ``out`` say: per benchmark its runs, job time and gate verdicts; cold starts; the
    package checker's verdict and release."""
    benchmarks: dict[str, dict[str, Any]] = {}
    cold: list[str] = []
    for record_file in sorted(out.glob("runs/*/*/*/run.json"), key=lambda p: (p.parts[-3], int(p.parts[-2]))):
        record = json.loads(record_file.read_text())
        bm = benchmarks.setdefault(record["benchmark"], {"runs": [], "job_s": 0.0, "gate_passed": 0,
                                                         "gate_failed_keys": []})
        system, benchmark, index = record_file.parts[-4:-1]
        bm["runs"].append({"run": int(index), "status": record["status"], "epochs": record["epochs"],
                           "final_metric": record["final_metric"]})
        bench = out / "pipeline_info" / "benchmarks" / f"run_{system}_{benchmark}_{index}.tsv"
        bm["job_s"] += bench_seconds(bench) if bench.exists() else 0.0
        if (out / "compliance" / system / benchmark / f"{index}.json").exists():
            bm["gate_passed"] += 1
        else:
            failed = gate_failures(out / "pipeline_info" / "logs" / f"compliance_{system}_{benchmark}_{index}.log")
            bm["gate_failed_keys"] = sorted(set(bm["gate_failed_keys"]) | set(failed))
        log = out / "pipeline_info" / "logs" / f"run_{system}_{benchmark}_{index}.log"
        reasons = [line[len(COLD):] for line in log.read_text(errors="replace").splitlines()
                   if line.startswith(COLD)] if log.exists() else []
        if reasons:
            cold.append(f"{benchmark}/{index}: {reasons[0]}")
    verdict_file = out / "package_check.json"
    package = json.loads(verdict_file.read_text()) if verdict_file.exists() else {}
    return {"benchmarks": benchmarks, "cold_starts": cold,
            "package_valid": package.get("valid"), "package_errors": package.get("errors"),
            "judged_by": package.get("judged_by"),
            "runs": sum(len(b["runs"]) for b in benchmarks.values()),
            "converged": sum(r["status"] == "success" for b in benchmarks.values() for r in b["runs"])}


def print_repeat(i: int, row: dict[str, Any]) -> None:
    package = ("no package" if row["package_valid"] is None else
               "found no errors" if row["package_valid"] else f"found errors: {row['package_errors']}")
    print(f"repeat {i}: {row['wall_s']:.1f} s from clean, {row['cpu_s']:.1f} s of CPU (exit {row['exit']}, load "
          f"{row['load_1min_before']:.2f} before, {row['load_1min_after']:.2f} after); "
          f"{row['converged']}/{row['runs']} runs converged; package checker: {package} ({row['judged_by']})",
          flush=True)
    for name, b in row["benchmarks"].items():
        gate = f"gate passed {b['gate_passed']}/{len(b['runs'])}" + (
            f", failed on {', '.join(b['gate_failed_keys'])}" if b["gate_failed_keys"] else "")
        runs = ", ".join(f"{r['run']}: {r['epochs']} ep {r['final_metric']:.4f}"
                         + ("" if r["status"] == "success" else f" ({r['status']})") for r in b["runs"])
        print(f"  {name:16} job time {b['job_s']:6.1f} s; {gate}; runs {runs}", flush=True)
    if row["cold_starts"]:
        print(f"  WARNING: {len(row['cold_starts'])} runs started cold, e.g. {row['cold_starts'][0]}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--release", type=Path, help="a folder of mlperf-logging releases named by tag (with 6.0.0-rc6)")
    p.add_argument("--full", action="store_true", help="all seven benchmarks (config/v6.0-full.yaml), 56 runs")
    p.add_argument("--workdir", type=Path, help="keep the outputs here (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=Path("v60_suite.json"))
    args = p.parse_args()
    # the warm parents detach from the invocation: as their subreaper, this process counts their CPU time too
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    base = args.workdir or Path(tempfile.mkdtemp(prefix="mlrepro-v60-"))
    release = (args.release or unpack_release(base / "releases")).resolve()
    sys.exit(0 if repeat(args, "v6.0", lambda workdir: suite(workdir, release, args.full), base) else 1)


def repeat(args: argparse.Namespace, label: str, run: Callable[[Path], dict[str, Any]], base: Path) -> bool:
    """``args.repeat`` runs of the suite from clean, each in its own empty folder below ``base``; their medians
    written to ``args.json``; True when the median wall time is within the budget and every run exited 0 (with
    ``args.full``: whatever the exit)."""
    rows = []
    for i in range(args.repeat):
        workdir = base / f"suite{i}"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        row = run(workdir)
        rows.append(row)
        print_repeat(i, row)
    summary = {"repeat": args.repeat, "cores": os.cpu_count(), "budget_s": BUDGET_S, "full": args.full,
               "wall_s": [r["wall_s"] for r in rows], "wall_s_median": statistics.median(r["wall_s"] for r in rows),
               "cpu_s": [r["cpu_s"] for r in rows], "cpu_s_median": statistics.median(r["cpu_s"] for r in rows),
               "load_1min_before": [r["load_1min_before"] for r in rows], "rows": rows}
    args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{label} suite{' (full)' if args.full else ''} from clean: median {summary['wall_s_median']:.1f} s "
          f"(budget {BUDGET_S:.0f} s), {summary['cpu_s_median']:.1f} s of CPU, over {args.repeat}; "
          f"{os.cpu_count()} cores; load before {summary['load_1min_before']}; wrote {args.json}")
    return summary["wall_s_median"] <= BUDGET_S and all(r["exit"] == 0 or args.full for r in rows)

if __name__ == "__main__":
    main()
