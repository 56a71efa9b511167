"""The v6.1 mini suite from clean against its budget (issue 44: 43 runs in at most 5 minutes on the 2-core machine).

Usage: python benchmarks/v61_suite.py [--repeat N] [--full] [--workdir DIR] [--json OUT]

Each repeat: ``snakemake --cores all --configfile config/v6.1.yaml`` (llama31_8b, llama2_70b_lora, flux1, gpt_oss_20b:
10 runs each; qwen35_397b_grpo: 3; ``--full``: with config/v6.1-full.yaml and ``--keep-going``) in an empty folder,
judged by the release the configuration names (none: the installed mlperf-logging, whose training_6.1.0 judges).
Per repeat, as benchmarks/v60_suite.py reports them: the wall time, the CPU time of everything the invocation
started (the warm start's detached parents included), the 1-minute load before and after, per benchmark its runs'
job time, each run's status, epochs and final metric and the gate's verdicts, the runs that started cold, and the
package checker's verdict and release. Figures are medians over the repeats; the JSON (default v61_suite.json) holds
each repeat. Each mini's CPU time per run: ``python benchmarks/v60_runs.py --benchmarks <the five>``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.v60_suite import PR_SET_CHILD_SUBREAPER, children_cpu, collect, reap_orphans, repeat  # noqa: E402

OUTDIR = "results-v6.1"


def suite(workdir: Path, full: bool) -> dict[str, Any]:
    configs = ["config/v6.1.yaml", *(["config/v6.1-full.yaml"] if full else [])]
    load = os.getloadavg()[0]
    cpu, start = children_cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                           str(workdir), "--cores", "all", "--quiet", "all", "--configfile", *configs,
                           *(["--keep-going"] if full else [])], cwd=REPO, check=False)
    wall = time.perf_counter() - start
    reap_orphans()
    cpu = children_cpu() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "exit": proc.returncode, "load_1min_before": load,
            "load_1min_after": os.getloadavg()[0], **collect(workdir / OUTDIR)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--full", action="store_true", help="with config/v6.1-full.yaml (--keep-going), 56 runs")
    p.add_argument("--workdir", type=Path, help="keep the outputs here (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=Path("v61_suite.json"))
    args = p.parse_args()
    # the warm parents detach from the invocation: as their subreaper, this process counts their CPU time too
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    base = args.workdir or Path(tempfile.mkdtemp(prefix="mlrepro-v61-"))
    sys.exit(0 if repeat(args, "v6.1", lambda workdir: suite(workdir, args.full), base) else 1)


if __name__ == "__main__":
    main()
