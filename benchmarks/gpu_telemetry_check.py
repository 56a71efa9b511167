"""GPU check of the telemetry: ``python benchmarks/gpu_telemetry_check.py [--trials 3] [--seconds 8]``.

On a machine with an NVIDIA GPU it trains the mini ResNet on the GPU in alternating trials with the
sampler off and on (10 Hz, NVML + host), and prints the sampler's CPU use, the median step time with
and without it, and per trial the energy by the counter against the power integral. Under 5 minutes.
Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from mlrepro import PROJECT_ROOT
from mlrepro.telemetry import start_sampler, summarize
from mlrepro.telemetry.backend import BackendUnavailable
from mlrepro.telemetry.nvml import NvmlBackend


def gpu_available() -> str | None:
    """None when there is a GPU to test on, else why not."""
    try:
        nv = NvmlBackend()
        nv.open()
        n = len(nv.devices())
        nv.close()
        if n == 0:
            return "NVML sees no GPU"
    except BackendUnavailable as e:
        return str(e)
    import torch

    return None if torch.cuda.is_available() else "torch sees no CUDA device"


def step_times(workload: Any, seconds: float) -> list[float]:
    """Per-step seconds (each epoch's time over its steps) for about ``seconds`` of training."""
    import torch

    from mlrepro.training.loop import train_epoch

    out, t_end, epoch = [], time.monotonic() + seconds, 1
    while time.monotonic() < t_end:
        torch.cuda.synchronize()
        t = time.perf_counter()
        train_epoch(workload, epoch)
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / workload.steps_per_epoch)
        epoch += 1
    return out


def trial(workload: Any, seconds: float, out_dir: Path | None) -> dict[str, Any]:
    if out_dir is None:
        return {"steps": step_times(workload, seconds)}
    handle = start_sampler(out_dir, hz=10.0, watch_pid=psutil.Process().pid)
    if handle.status != "running" or handle.proc is None:
        raise SystemExit(f"sampler did not start: {handle.status}")
    proc = psutil.Process(handle.proc.pid)
    c0, w0 = proc.cpu_times(), time.monotonic()
    start = time.time_ns() // 1_000_000
    steps = step_times(workload, seconds)
    stop = time.time_ns() // 1_000_000
    c1, w1 = proc.cpu_times(), time.monotonic()
    handle.stop()
    s = summarize(out_dir, start, stop)
    cpu = 100 * ((c1.user + c1.system) - (c0.user + c0.system)) / (w1 - w0)
    return {"steps": steps, "sampler_cpu_pct": cpu, "summary": s}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=3, help="trials with the sampler on, and as many off")
    p.add_argument("--seconds", type=float, default=8.0, help="training time per trial")
    args = p.parse_args()
    why = gpu_available()
    if why:
        print(f"no NVIDIA GPU here ({why}): nothing to check")
        return 0

    import torch

    from mlrepro.core.minis import load_module
    from mlrepro.datasets import generated

    params = yaml.safe_load((PROJECT_ROOT / "minis/resnet/defaults.yaml").read_text())
    params["max_epochs"] = 10_000  # the schedule's length; trials stop on time
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        generated.generate("resnet", data_dir, params, seed=1)
        torch.manual_seed(1)
        workload = load_module("resnet").Workload(data_dir, params, torch.device("cuda"), seed=1)
        step_times(workload, 2.0)  # warm-up: cuDNN autotuning, allocator
        off: list[float] = []
        on: list[dict[str, Any]] = []
        for i in range(args.trials):  # alternate, so drift hits both arms alike
            off += trial(workload, args.seconds, None)["steps"]
            on.append(trial(workload, args.seconds, Path(tmp) / f"telemetry{i}"))
    on_steps = [s for r in on for s in r["steps"]]
    med_off, med_on = statistics.median(off) * 1e3, statistics.median(on_steps) * 1e3
    print(f"GPU: {torch.cuda.get_device_name(0)}; {args.trials} trials of {args.seconds:g} s each way")
    print(f"median step time: sampler off {med_off:.3f} ms, on {med_on:.3f} ms "
          f"({100 * (med_on - med_off) / med_off:+.2f}%)")
    cpus = [r["sampler_cpu_pct"] for r in on]
    print(f"sampler CPU at 10 Hz: {statistics.median(cpus):.2f}% of one core (trials: "
          f"{', '.join(f'{c:.2f}' for c in cpus)})")
    for i, r in enumerate(on):
        s = r["summary"]
        print(f"trial {i}: nvml={s.get('nvml')} partial={s.get('partial')} {s.get('reasons')}")
        for g in s.get("gpus", []):
            print(f"  {g['name']} {g['uuid']}: energy counter {g['energy_counter_j']} J, power integral "
                  f"{g['energy_power_integral_j']} J, disagreement {g['disagreement_pct']}%, mean "
                  f"{g['mean_power_w']} W, peak {g['peak_power_w']} W, util {g['mean_util_pct']}%, "
                  f"samples {g['samples']}, overruns {g['overruns']}, unsupported {g['unsupported_fields']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
