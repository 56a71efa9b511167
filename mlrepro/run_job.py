"""One run of one benchmark, as one Snakemake job: the sampler beside it, training in its engine.

The training process (``python -m mlrepro.train``) runs through the configured engine; the telemetry
sampler is a separate process on the host that watches this driver and stops with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from mlrepro import atomic, environment
from mlrepro.data import sha256_file
from mlrepro.engines import Engine, Mount, get_engine
from mlrepro.logs import run_window


class RunFailed(RuntimeError):
    pass


def wants_gpus(device: str) -> bool:
    """GPU device requests only for GPU jobs: "auto" asks for them only where NVML sees a GPU."""
    if device == "cpu":
        return False
    return device.startswith("cuda") or bool(environment.gpus()["devices"])


def _image_identity(record_path: Path, ref: str | None) -> dict[str, object]:
    record = json.loads(record_path.read_text())
    return {"name": record["image"], "ref": ref, "tag": record.get("tag"), "id": record.get("id"),
            "repo_digests": record.get("repo_digests", []), "file": record.get("file")}


def _run(engine: Engine, argv: list[str], image: str | None, args: argparse.Namespace, run_dir: Path,
         log: Path) -> int:
    try:
        return engine.run(
            argv,
            image=image,
            mounts=[Mount(args.data_dir.resolve(), read_only=True), Mount(run_dir, read_only=False)],
            gpus=wants_gpus(args.device),
            env={"OMP_NUM_THREADS": str(args.threads), "PYTHONHASHSEED": "0"},
            log=log,
        )
    except Exception as e:  # the engine's own errors (API, missing image) as one clear message
        raise RunFailed(f"{args.benchmark} run in {run_dir}: engine {args.engine} could not run it "
                        f"(image {image}): {type(e).__name__}: {e}") from e


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.run_job", description=__doc__)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--params", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--submission", required=True)
    p.add_argument("--engine", default="native")
    p.add_argument("--engine-socket", default=None, help="Docker API URL (docker/podman engines)")
    p.add_argument("--image-record", type=Path, default=None, help="the image's build record (container engines)")
    p.add_argument("--locked", action="store_true", help="run the locked image id; refuse a mismatch")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--drop-caches", action="store_true")
    p.add_argument("--telemetry-hz", type=float, default=0.0, help="0 disables the sampler")
    args = p.parse_args(argv)

    run_dir: Path = args.run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    result, summary, log = run_dir / "result.txt", run_dir / "run.json", run_dir / "train.log"
    log.unlink(missing_ok=True)
    engine = get_engine(args.engine, socket=args.engine_socket)
    image = None
    if args.image_record:
        from mlrepro.containers.lock import image_ref  # the Docker SDK only where a container runs

        image = image_ref(args.image_record, locked=args.locked)
    partial_summary = atomic.temp_name(summary)
    train_argv = [
        "python", "-m", "mlrepro.train",
        "--benchmark", args.benchmark,
        "--data-dir", str(args.data_dir.resolve()),
        "--params", args.params,
        "--seed", str(args.seed),
        "--result", str(result),
        "--summary", str(partial_summary),
        "--submission", args.submission,
        "--device", args.device,
        "--threads", str(args.threads),
        *(["--drop-caches"] if args.drop_caches else []),
    ]
    sampler = None
    if args.telemetry_hz > 0:
        from mlrepro.telemetry import start_sampler

        sampler = start_sampler(run_dir / "telemetry", hz=args.telemetry_hz, watch_pid=os.getpid())
    try:
        code = _run(engine, train_argv, image, args, run_dir, log)
    finally:
        if sampler is not None:
            sampler.stop()
    if code != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise RunFailed(f"{args.benchmark} run in {run_dir}: training exited with status {code} "
                        f"(engine {args.engine}); its log is kept at {log}. Last lines:\n{tail}")
    record = json.loads(partial_summary.read_text())
    partial_summary.unlink()
    # Every later use of the result (gate, package, score, report) verifies it against this hash.
    record["result_sha256"] = sha256_file(result)
    start_ms, stop_ms = run_window(result)
    record["run_start_ms"], record["run_stop_ms"] = start_ms, stop_ms
    record["engine"] = args.engine
    record["image"] = _image_identity(args.image_record, image) if args.image_record else None
    if sampler is not None:
        from mlrepro.telemetry import summarize

        record["telemetry"] = summarize(run_dir / "telemetry", start_ms, stop_ms)
    atomic.write_json(summary, record)


if __name__ == "__main__":
    try:
        main()
    except RunFailed as e:
        sys.exit(f"error: {e}")
