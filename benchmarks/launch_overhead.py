"""What the launch path through run_and_time.sh costs per run (the issue allows at most +0.2 s).

    .venv/bin/python benchmarks/launch_overhead.py [--repeats 5]

The same tiny mini-ResNet run (1 epoch on 128 images, native engine, no telemetry), alternating:
(a) ``python -m mlrepro.train`` started directly, as the run driver did before; (b) the whole driver
``python -m mlrepro.runs.driver`` with a launch file: the driver's own start, the per-GPU claim,
``bash run_and_time.sh``, the :::MLLOG extraction and run.json from result.txt. The figure is the
difference of the medians of the wall times; the config file's capture (its capture job's bash, once per
content of the folder: mlrepro/runs/capture.py) is timed on its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from mlrepro import PROJECT_ROOT
from mlrepro.datasets import generated
from mlrepro.runs.capture import source_native
from mlrepro.runs.driver import launch_env
from mlrepro.runs.launch_spec import LaunchSpec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    params = yaml.safe_load((PROJECT_ROOT / "minis/resnet/defaults.yaml").read_text())
    params["data"].update(train_samples=128, eval_samples=64)
    params.update(max_epochs=1, target=0.0)
    params = {k: v for k, v in params.items() if k != "image"}
    folder = PROJECT_ROOT / "minis" / "resnet"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        generated.generate("resnet", tmp / "data", params, seed=1)
        spec = LaunchSpec(benchmark="resnet", kind="mini", name="mlrepro-pytorch", folder=str(folder),
                          config_file="config_CPU.sh", env=source_native(folder / "config_CPU.sh").env, params=params,
                          data_dir=str(tmp / "data"), gpus=0, threads=1, device="cpu", drop_caches=False,
                          submission={"org": "x", "platform": "y", "division": "open", "status": "research"})
        spec.write(tmp / "launch.json")
        direct = [sys.executable, "-m", "mlrepro.train", "--benchmark", "resnet", "--data-dir", str(tmp / "data"),
                  "--params", json.dumps(params), "--seed", "7", "--result", str(tmp / "direct.txt"),
                  "--device", "cpu", "--submission", json.dumps(spec.submission)]
        driver = [sys.executable, "-m", "mlrepro.runs.driver", "--launch", str(tmp / "launch.json"), "--seed", "7",
                  "--run-dir", str(tmp / "run"), "--engine", "native", "--gpu-locks", str(tmp / "locks")]
        script = ["bash", str(folder / "run_and_time.sh")]
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               **launch_env(spec, 7, str(tmp / "data"), str(tmp))}
        times: dict[str, list[float]] = {"direct": [], "script": [], "driver": []}
        for _ in range(args.repeats):
            for name, cmd in (("direct", direct), ("script", script), ("driver", driver)):
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env if name == "script" else None)
                times[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            source_native(folder / "config_CPU.sh")
        capture_s = (time.perf_counter() - t0) / args.repeats
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"repeats": args.repeats, "median_s": med,
                      "script_hop_s": round(med["script"] - med["direct"], 3),
                      "driver_total_over_direct_s": round(med["driver"] - med["direct"], 3),
                      "config_capture_s": round(capture_s, 4), "all_s": times}, indent=2))


if __name__ == "__main__":
    main()
