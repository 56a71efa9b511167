"""Per-run cost and convergence of the v6.0 decoder minis (llama31_8b, llama31_405b, llama2_70b_lora, gpt_oss_20b,
deepseekv3_671b), one run at a time as the run stage starts them (``python -m mlrepro.train``, one thread).

Usage: python benchmarks/v60_decoder_runs.py [--seeds 1,2,3] [--benchmarks a,b] [--json OUT]

Per benchmark: the data step's time (once, data seed 7), the model's parameters, and per run seed: the wall
time of the process, its CPU time, the loop's time to train, the epochs, the final metric against the target.
Medians over the seeds; the 1-minute load before each benchmark, since a loaded machine stretches wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from mlrepro.core.workflows import workflow_dir  # noqa: E402
from mlrepro.datasets import generated  # noqa: E402

BENCHMARKS = ["llama31_8b", "llama31_405b", "llama2_70b_lora", "gpt_oss_20b", "deepseekv3_671b"]
SUBMISSION = json.dumps({"org": "bench", "platform": "cpu", "division": "open", "status": "research"})


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def parameters(benchmark: str, data_dir: Path, params: dict[str, Any]) -> tuple[int, int]:
    """(all parameters, trainable ones) of the benchmark's model."""
    import torch

    from mlrepro.core.workflows import load_module

    model = load_module(benchmark).Workload(data_dir, params, torch.device("cpu"), 0).model
    return (sum(p.numel() for p in model.parameters()),
            sum(p.numel() for p in model.parameters() if p.requires_grad))


def measure(benchmark: str, seeds: list[int], work: Path) -> dict[str, Any]:
    params = yaml.safe_load((workflow_dir(benchmark) / "defaults.yaml").read_text())
    load = os.getloadavg()[0]
    start = time.perf_counter()
    generated.generate(benchmark, work / benchmark / "data", {"data": params["data"]}, seed=7)
    data_s = time.perf_counter() - start
    total, trainable = parameters(benchmark, work / benchmark / "data", params)
    runs = []
    for seed in seeds:
        summary = work / benchmark / f"run{seed}.json"
        cpu, start = children_cpu(), time.perf_counter()
        subprocess.run([sys.executable, "-m", "mlrepro.train", "--benchmark", benchmark, "--data-dir",
                        str(work / benchmark / "data"), "--params", json.dumps(params), "--seed", str(seed),
                        "--result", str(work / benchmark / f"result{seed}.txt"), "--summary", str(summary),
                        "--submission", SUBMISSION, "--device", "cpu", "--threads", "1"],
                       check=True, capture_output=True, cwd=REPO)
        wall, cpu = time.perf_counter() - start, children_cpu() - cpu
        run = json.loads(summary.read_text())
        runs.append({"seed": seed, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                     "time_to_train_s": run["time_to_train_ms"] / 1000, "status": run["status"],
                     "epochs": run["epochs"], "final_metric": round(run["final_metric"], 4)})
    return {"benchmark": benchmark, "load_1min": round(load, 2), "data_s": round(data_s, 2), "parameters": total,
            "trainable": trainable, "target": params["target"], "runs": runs,
            "median_wall_s": statistics.median(r["wall_s"] for r in runs),
            "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "median_time_to_train_s": statistics.median(r["time_to_train_s"] for r in runs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    p.add_argument("--json", type=Path, default=Path("v60_decoder_runs.json"))
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure(b, seeds, Path(tmp)) for b in args.benchmarks.split(",")]
    for r in results:
        runs = ", ".join(f"{x['epochs']} ep {x['final_metric']}" for x in r["runs"])
        print(f"{r['benchmark']:16} params {r['parameters']:>7} (trainable {r['trainable']:>6})"
              f"  data {r['data_s']:5.2f} s  run wall {r['median_wall_s']:5.2f} s cpu {r['median_cpu_s']:5.2f} s"
              f" ttt {r['median_time_to_train_s']:5.2f} s  load {r['load_1min']:5.2f}  target {r['target']}: {runs}")
    args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
