"""Figures for the containers: image build time (cold and cached), per-run start overhead, bundle size.

    MLREPRO_PODMAN_SOCKET=unix:///tmp/mlrepro-podman/podman.sock .venv/bin/python benchmarks/container_overhead.py

Overhead: the same tiny mini-ResNet run (1 epoch on 128 images) through the native engine and
through the container engine, alternating, ``--repeats`` times each; the figure is the difference
of the medians of the wall times (engine.run call to return).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from mlrepro import PROJECT_ROOT
from mlrepro.containers.build import build_image
from mlrepro.containers.bundle import save_image
from mlrepro.datasets import generated
from mlrepro.engines import Mount, get_engine
from mlrepro.engines.client import connect


def tiny_resnet(work: Path) -> tuple[list[str], list[Mount], Path]:
    params = yaml.safe_load((PROJECT_ROOT / "minis/resnet/defaults.yaml").read_text())
    params["data"].update(train_samples=128, eval_samples=64)
    params.update(max_epochs=1, target=0.0)
    data_dir, run_dir = work / "data", work / "run"
    generated.generate("resnet", data_dir, params, seed=1)
    argv = ["python", "-m", "mlrepro.train", "--benchmark", "resnet", "--data-dir", str(data_dir),
            "--params", json.dumps(params), "--seed", "7", "--result", str(run_dir / "result.txt"),
            "--summary", str(run_dir / "run.json"), "--device", "cpu",
            "--submission", json.dumps({"org": "bench", "platform": "local"})]
    return argv, [Mount(data_dir, read_only=True), Mount(run_dir, read_only=False)], run_dir


def timed_run(engine: Any, argv: list[str], image: str | None, mounts: list[Mount], log: Path) -> float:
    start = time.monotonic()
    code = engine.run(argv, image=image, mounts=mounts, gpus=[], env={"OMP_NUM_THREADS": "1"}, log=log)
    if code != 0:
        raise SystemExit(f"run failed ({code}); see {log}")
    return time.monotonic() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", default=os.environ.get("MLREPRO_PODMAN_SOCKET"))
    p.add_argument("--engine", default="podman", choices=["podman", "docker"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here too")
    args = p.parse_args()
    client = connect(args.engine, args.socket)
    figures: dict[str, Any] = {"engine": args.engine, "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="mlrepro-bench-") as tmp:
        work = Path(tmp)
        sys.path.insert(0, str(PROJECT_ROOT))  # the CI helper that builds the base image lives in tests/
        from tests.localbase import ensure_base_image

        figures["base_image"] = ensure_base_image(client, workdir=work)
        build_args = {"BASE_IMAGE": figures["base_image"]["ref"]}
        cold = build_image(client, "pytorch", build_args=build_args, log=work / "cold.log", nocache=True,
                           tag_prefix="localhost/mlrepro-bench-")
        cached = build_image(client, "pytorch", build_args=build_args, log=work / "cached.log",
                             tag_prefix="localhost/mlrepro-bench-")
        figures["build_cold_seconds"] = cold["build_seconds"]
        figures["build_cached_seconds"] = cached["build_seconds"]
        figures["image_bytes"] = cold["size_bytes"]

        argv, mounts, _ = tiny_resnet(work)
        native, container = get_engine("native"), get_engine(args.engine, socket=args.socket)
        times: dict[str, list[float]] = {"native": [], args.engine: []}
        for i in range(args.repeats):  # alternating, so a change in the machine's load hits both alike
            times["native"].append(timed_run(native, argv, None, mounts, work / f"native{i}.log"))
            times[args.engine].append(timed_run(container, argv, cached["tag"], mounts, work / f"c{i}.log"))
        med = {k: round(statistics.median(v), 2) for k, v in times.items()}
        figures["run_seconds"] = {k: [round(x, 2) for x in v] for k, v in times.items()}
        figures["run_median_seconds"] = med
        figures["per_run_overhead_seconds"] = round(med[args.engine] - med["native"], 2)

        start = time.monotonic()
        saved = save_image(client, cached["id"], cached["tag"], work / "pytorch.tar")
        figures["bundle_image_bytes"] = saved["bytes"]
        figures["bundle_save_seconds"] = round(time.monotonic() - start, 1)
    figures["load_avg_end"] = os.getloadavg()
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
