"""Per-run cost and convergence of the v6.0 minis, each run as the pipeline's warm start serves it: forked from a
parent that has imported what the warm parent imports (mlrepro/runs/warm.py), ``python -m mlrepro.train`` run in
the child as ``__main__``, one thread.

Usage: python benchmarks/v60_runs.py [--runs N] [--benchmarks a,b] [--override JSON] [--cold] [--json OUT]

Per benchmark: the data step's CPU time (the pipeline's data seed), the model's parameters, and per run (the
pipeline's run seeds for run indices 0..N-1): the CPU time (user + sys) of the run's process, its wall time, the
loop's time to train, the epochs and the final metric against the target; medians. For the decoder minis, the
throughput of the training step and of the evaluation in tokens per CPU-second, on the benchmark's own batches.
``--override`` merges {benchmark: {key: value}} into the benchmarks' defaults (e.g. llama31_405b on packed
sequences: {"llama31_405b": {"data": {"document_length": 32, "max_sequence_length": 8192, "eval_samples": 4}}}).
``--cold``: each run a new interpreter (``python -P -m mlrepro.train``), as without the warm start. The 1-minute
load before each benchmark is reported: load stretches wall times, CPU times much less.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from mlrepro.config import run_seed  # noqa: E402
from mlrepro.core.minis import mini_dir  # noqa: E402
from mlrepro.runs import warm  # noqa: E402

BENCHMARKS = ["llama31_8b", "llama31_405b", "llama2_70b_lora", "flux1", "gpt_oss_20b", "deepseekv3_671b", "dlrm_dcnv2"]
SUBMISSION = json.dumps({"org": "bench", "platform": "cpu", "division": "open", "status": "research"})


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def in_child(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()`` in a forked child (the parent keeps no state of it): its JSON result, CPU (user + sys) and wall."""
    read, write = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            result = fn()
        except SystemExit as e:
            result, code = None, e.code if isinstance(e.code, int) else 1
        except BaseException as e:  # reported by the parent
            import traceback
            result, code = "".join(traceback.format_exception(e)), 1
        with contextlib.suppress(Exception):
            import atexit
            atexit._run_exitfuncs()  # as the warm parent's child does: loggers flush and close
        os.write(write, json.dumps(result).encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        payload = f.read()
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the child failed: {payload}")
    return json.loads(payload), usage.ru_utime + usage.ru_stime, time.perf_counter() - start


def train_argv(benchmark: str, work: Path, params: dict[str, Any], seed: int) -> list[str]:
    return ["--benchmark", benchmark, "--data-dir", str(work / "data"), "--params", json.dumps(params),
            "--seed", str(seed), "--result", str(work / f"result{seed}.txt"),
            "--summary", str(work / f"run{seed}.json"), "--submission", SUBMISSION, "--device", "cpu", "--threads", "1"]


def run_warm(argv: list[str]) -> None:
    sys.argv = ["-m", *argv]
    sys.modules.pop(warm.MODULE, None)  # as the warm parent's child: the module runs once, as __main__
    runpy.run_module(warm.MODULE, run_name="__main__", alter_sys=True)


def run_cold(argv: list[str]) -> tuple[float, float]:
    before = os.times()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-P", "-m", warm.MODULE, *argv], check=True, capture_output=True, cwd=REPO)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system), \
        time.perf_counter() - start


def describe(benchmark: str, data_dir: Path, params: dict[str, Any]) -> dict[str, Any]:
    """Parameters, and for a decoder mini the tokens per CPU-second of a training epoch and of an evaluation."""
    import torch

    from mlrepro.core.minis import load_module
    from mlrepro.training.loop import seed_everything, train_epoch

    torch.set_num_threads(1)
    seed_everything(0)
    w = load_module(benchmark).Workload(data_dir, params, torch.device("cpu"), 0)
    out: dict[str, Any] = {"parameters": sum(p.numel() for p in w.model.parameters()),
                           "trainable": sum(p.numel() for p in w.model.parameters() if p.requires_grad)}
    if not isinstance(getattr(w, "eval_tokens", None), torch.Tensor):
        return out
    train_epoch(w, 1)  # the first epoch pays the kernels' first calls
    start = time.process_time()
    train_epoch(w, 2)
    seconds = time.process_time() - start
    tokens = w.steps_per_epoch * w.batch * w.tokens.shape[1]
    out["train_tokens_per_cpu_s"] = round(tokens / seconds)
    out["step_tokens"] = w.batch * w.tokens.shape[1]
    out["step_cpu_ms"] = round(1000 * seconds / w.steps_per_epoch, 1)
    start = time.process_time()
    w.evaluate(2)
    out["eval_tokens"] = w.eval_tokens.numel()
    out["eval_cpu_s"] = round(time.process_time() - start, 3)
    out["eval_tokens_per_cpu_s"] = round(w.eval_tokens.numel() / out["eval_cpu_s"])
    return out


def measure(benchmark: str, runs: int, data_seed: int, over: dict[str, Any], cold: bool, work: Path) -> dict[str, Any]:
    from mlrepro.datasets import generated

    params = merged(yaml.safe_load((mini_dir(benchmark) / "defaults.yaml").read_text()), over)
    work.mkdir(parents=True)
    load = os.getloadavg()[0]
    _, data_cpu, _ = in_child(lambda: generated.generate(benchmark, work / "data", {"data": params["data"]},
                                                         seed=data_seed) and None)
    info, _, _ = in_child(lambda: describe(benchmark, work / "data", params))
    rows = []
    for index in range(runs):
        seed = run_seed(0, benchmark, index)  # the embedded default's seed: 0
        argv = train_argv(benchmark, work, params, seed)
        if cold:
            cpu, wall = run_cold(argv)
        else:
            _, cpu, wall = in_child(lambda argv=argv: run_warm(argv))  # type: ignore[misc]
        run = json.loads((work / f"run{seed}.json").read_text())
        rows.append({"run": index, "seed": seed, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
                     "time_to_train_s": run["time_to_train_ms"] / 1000, "status": run["status"],
                     "epochs": run["epochs"], "final_metric": round(run["final_metric"], 4)})
    return {"benchmark": benchmark, "load_1min_before": round(load, 2), "data_cpu_s": round(data_cpu, 2),
            **info, "target": params["target"], "runs": rows,
            "converged": sum(r["status"] == "success" for r in rows),
            **{f"median_{k}": statistics.median(r[k] for r in rows) if rows else float("nan")
               for k in ("cpu_s", "wall_s", "time_to_train_s")}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="runs per benchmark (the pipeline's run indices 0..N-1); "
                   "0: the throughput only")
    p.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    p.add_argument("--data-seed", type=int, default=yaml.safe_load((REPO / "config" / "config.yaml").read_text())[
        "data_seed"], help="default: the embedded default's")
    p.add_argument("--override", default="{}", help="JSON {benchmark: {key: value}} merged into the defaults")
    p.add_argument("--cold", action="store_true", help="each run a new interpreter")
    p.add_argument("--json", type=Path, default=Path("v60_runs.json"))
    args = p.parse_args()
    over = json.loads(args.override)
    if not args.cold:  # what the warm parent imports before it forks a run
        importlib.import_module(warm.MODULE)
        for name in warm._PRELOAD[warm.MODULE]:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        warm._import_workload_dependencies()
    results = []
    # not a TemporaryDirectory: its clean-up is an exit function, which each child runs at its end
    tmp = tempfile.mkdtemp(prefix="mlrepro-v60-runs-")
    try:
        for i, b in enumerate(args.benchmarks.split(",")):
            r = measure(b, args.runs, args.data_seed, over.get(b, {}), args.cold, Path(tmp) / f"{i}-{b}")
            results.append(r)
            runs = ", ".join(f"{x['epochs']} ep {x['final_metric']}" for x in r["runs"])
            speed = (f"  train {r['train_tokens_per_cpu_s']} tok/cpu-s ({r['step_tokens']} per step, "
                     f"{r['step_cpu_ms']} ms)  eval {r['eval_tokens_per_cpu_s']} tok/cpu-s ({r['eval_tokens']} tokens, "
                     f"{r['eval_cpu_s']} s)" if "train_tokens_per_cpu_s" in r else "")
            print(f"{b:16} params {r['parameters']:>7}  data {r['data_cpu_s']:5.2f} s  run cpu "
                  f"{r['median_cpu_s']:5.2f} s wall {r['median_wall_s']:5.2f} s ttt "
                  f"{r['median_time_to_train_s']:5.2f} s  load {r['load_1min_before']:5.2f}  "
                  f"{r['converged']}/{len(r['runs'])} reached {r['target']}: {runs}{speed}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    args.json.write_text(json.dumps({"cold": args.cold, "data_seed": args.data_seed, "override": over,
                                     "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
