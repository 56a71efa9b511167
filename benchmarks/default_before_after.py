"""The embedded default from clean on an earlier commit and on this checkout, alternating: wall times (medians) and
whether the same seeds give the same results (issue 34: every bar of today's behaviour kept, speed within 10%).

Usage: python benchmarks/default_before_after.py --before REV [--pairs N] [--workdir DIR] [--json OUT]
                                                 [--config KEY=VALUE ...]

``REV`` is checked out (``git worktree add --detach``) into the work folder; its Snakefile runs with that tree first
on ``PYTHONPATH``, so that its own ``mlrepro`` is imported, by this checkout's interpreter and Snakemake (the same
requirements at both commits: the script refuses otherwise). Per pair, from an empty folder each: ``snakemake
--cores all`` (the README's main job) on one tree, then on the other; the first alternates between pairs. Each run's
(seed, epochs, status, final metric, every metric) must be equal on both trees: the script says how many are.
``--config`` is given to Snakemake on both trees: ``--config "inference={'benchmarks': []}"`` compares the training
stages alone (on a loaded machine the inference stage's Server runs can miss their latency bound, and a failed job
ends the comparison).
"""

from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(REPO))
from benchmarks.pipeline_speed import run_figures  # noqa: E402

SAME = ("seed", "epochs", "status", "final_metric", "metrics")


def checkout(rev: str, folder: Path) -> Path:
    """``rev``'s tree in ``folder`` (detached); refused where its requirements differ from this checkout's."""
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), rev], cwd=REPO, check=True,
                   capture_output=True)
    ours, theirs = ([line.split("#")[0].strip() for line in p.read_text().splitlines()]
                    for p in (REPO / "requirements.txt", folder / "requirements.txt"))
    if ours != theirs:
        sys.exit(f"{rev}'s requirements.txt differs from this checkout's: compare in a venv of its own")
    return folder


def run(tree: Path, workdir: Path, config: list[str]) -> float:
    """``snakemake --cores all`` of ``tree``'s Snakefile from an empty ``workdir``: its wall time."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(tree / "Snakefile"), "--directory",
                    str(workdir), "--cores", "all", "--quiet", "all", *(["--config", *config] if config else [])],
                   check=True, cwd=tree, env=env)
    return time.perf_counter() - start


def results(workdir: Path) -> dict[str, dict[str, Any]]:
    return {name: {k: r[k] for k in SAME} for name, r in run_figures(workdir)["runs"].items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="the earlier commit (e.g. 88bb1f7)")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--workdir", type=Path, help="keep the outputs here (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=Path("default_before_after.json"))
    p.add_argument("--config", nargs="*", default=[], help="Snakemake's --config, on both trees")
    args = p.parse_args()
    base = args.workdir or Path(tempfile.mkdtemp(prefix="before-after-"))
    trees = {"before": checkout(args.before, base / "tree-before"), "after": REPO}
    walls: dict[str, list[float]] = {"before": [], "after": []}
    last: dict[str, dict[str, dict[str, Any]]] = {}
    differing: set[str] = set()
    try:
        for pair in range(args.pairs):
            for side in (("before", "after") if pair % 2 == 0 else ("after", "before")):
                folder = base / f"{side}-{pair}"
                walls[side].append(run(trees[side], folder, args.config))
                last[side] = results(folder)
                print(f"pair {pair}: {side} {walls[side][-1]:.1f} s, {len(last[side])} runs", flush=True)
            differing |= {n for n in last["before"].keys() | last["after"].keys()
                          if last["before"].get(n) != last["after"].get(n)}
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(trees["before"])], cwd=REPO, check=False)
    figures = {"before": args.before, "pairs": args.pairs, "config": args.config, "wall_s": walls,
               "median_s": {side: statistics.median(v) for side, v in walls.items()},
               "runs": len(last["after"]), "runs_differing": sorted(differing), "load": os.getloadavg()}
    figures["ratio_after_to_before"] = figures["median_s"]["after"] / figures["median_s"]["before"]
    args.json.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"median wall: before {figures['median_s']['before']:.1f} s, after {figures['median_s']['after']:.1f} s "
          f"(x{figures['ratio_after_to_before']:.3f}); {figures['runs'] - len(differing)} of {figures['runs']} runs "
          f"equal for the same seeds{'' if not differing else ': differing ' + ', '.join(sorted(differing))}")


if __name__ == "__main__":
    main()
