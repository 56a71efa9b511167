"""One (benchmark, scenario, mode) through the official LoadGen, as one process (LoadGen reads its
settings once per process: a second FromConfig is logged as an invalid config).

    python -m mlrepro.inference.run --benchmark resnet --scenario Offline --mode performance \
        --runs RUN_JSON... --data-dir D --params-file JSON_FILE --user-conf user.conf --out DIR

The served weights are the checkpoint of the first converged run among ``--runs``, verified against
the sha256 its run.json records. DIR receives LoadGen's own files and ``result.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlrepro.core import atomic
from mlrepro.core.hashing import sha256_file
from mlrepro.inference import settings, summary

RESULT = "result.json"


class InferenceFailed(RuntimeError):
    pass


def pick_checkpoint(run_records: list[Path]) -> dict[str, Any]:
    """The first converged run's checkpoint, its hash verified; a clear error when there is none."""
    for record_path in run_records:
        record = json.loads(record_path.read_text())
        entry = record.get("checkpoint")
        if record.get("status") != "success" or not entry:
            continue
        path = record_path.parent / entry["file"]
        if not path.is_file():
            raise InferenceFailed(f"{record_path}: records checkpoint {entry['file']} but {path} is missing")
        digest = sha256_file(path)
        if digest != entry["sha256"]:
            raise InferenceFailed(f"{path}: sha256 {digest} differs from {entry['sha256']} recorded in {record_path}; "
                                  "the weights changed after the run; re-run it")
        return {"run": record_path.parent.name, "path": str(path), "sha256": digest}
    raise InferenceFailed("no converged run with a checkpoint among " + ", ".join(map(str, run_records))
                          + "; inference serves only converged runs")


class QueueSUT:
    """A long-lived worker answers queries from a queue (LoadGen's issue callback must not block, and a
    thread per call crashes Offline runs, mlcommons/inference#1337). Offline's one huge query is cut into
    batches of ``batch`` samples."""

    def __init__(self, predict: Callable[[np.ndarray], np.ndarray], batch: int) -> None:
        import mlperf_loadgen as lg

        self.lg, self.predict, self.batch = lg, predict, batch
        self.queue: queue.Queue[list[Any] | None] = queue.Queue()
        self.worker = threading.Thread(target=self._work, daemon=True)
        self.worker.start()
        self.handle = lg.ConstructSUT(self.issue, self.flush)

    def issue(self, samples: list[Any]) -> None:
        for i in range(0, len(samples), self.batch):
            self.queue.put(samples[i : i + self.batch])

    def flush(self) -> None:
        pass

    def _work(self) -> None:
        while (samples := self.queue.get()) is not None:
            while len(samples) < self.batch:  # queries that queued up meanwhile go in the same batch (Server)
                try:
                    more = self.queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.queue.put(None)
                    break
                samples = samples + more
            out = np.ascontiguousarray(self.predict(np.array([s.index for s in samples], dtype=np.int64)))
            row = out.strides[0]
            responses = [self.lg.QuerySampleResponse(s.id, out.ctypes.data + i * row, row)
                         for i, s in enumerate(samples)]
            self.lg.QuerySamplesComplete(responses)  # copies what it logs before returning

    def close(self) -> None:
        self.queue.put(None)
        self.worker.join()
        self.lg.DestroySUT(self.handle)


def run_loadgen(predict: Callable[[np.ndarray], np.ndarray], count: int, model: str, scenario: str, mode: str,
                user_conf: Path, out_dir: Path, batch: int = 64) -> None:
    """LoadGen over a QSL of ``count`` in-memory samples; its logs land in ``out_dir`` (which must exist)."""
    import mlperf_loadgen as lg

    ts = lg.TestSettings()
    code = ts.FromConfig(str(user_conf), model, scenario)
    if code != 0:
        raise InferenceFailed(f"{user_conf}: LoadGen could not read it for {model}.{scenario} (code {code})")
    ts.scenario = getattr(lg.TestScenario, scenario)
    ts.mode = lg.TestMode.AccuracyOnly if mode == "accuracy" else lg.TestMode.PerformanceOnly
    log = lg.LogSettings()
    log.log_output.outdir = str(out_dir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    sut = QueueSUT(predict, batch)
    qsl = lg.ConstructQSL(count, count, lambda idx: None, lambda idx: None)  # the samples live in memory
    try:
        lg.StartTestWithLogSettings(sut.handle, qsl, ts, log)
    finally:
        lg.DestroyQSL(qsl)
        sut.close()


def accuracy_responses(path: Path) -> dict[int, bytes]:
    """LoadGen's accuracy log as qsl index -> bytes; a repeated index counts once, as the official scripts do."""
    responses: dict[int, bytes] = {}
    for entry in json.loads(path.read_text()):
        responses.setdefault(int(entry["qsl_idx"]), bytes.fromhex(entry["data"]))
    return responses


def _telemetry_start(out_dir: Path, hz: float) -> Any:
    """The NVML sampler beside performance runs, only where a GPU is present."""
    from mlrepro.environment import probe
    if hz <= 0 or not probe.gpus()["devices"]:
        return None
    from mlrepro.telemetry import start_sampler

    return start_sampler(out_dir / "telemetry", hz=hz, watch_pid=os.getpid())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.inference.run", description=__doc__)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--scenario", required=True, choices=summary.SCENARIOS)
    p.add_argument("--mode", required=True, choices=settings.MODES)
    p.add_argument("--runs", type=Path, nargs="+", required=True, help="the benchmark's run.json files, in order")
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--params-file", type=Path, required=True, help="the benchmark's config, a JSON file")
    p.add_argument("--user-conf", type=Path, required=True)
    p.add_argument("--shortened", action="store_true", help="the user.conf lowers the official minimums")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--telemetry-hz", type=float, default=0.0)
    args = p.parse_args(argv)

    import torch

    from mlrepro.inference import serve

    torch.set_num_threads(args.threads)
    checkpoint = pick_checkpoint(args.runs)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    params = json.loads(args.params_file.read_text())
    served = serve.load(args.benchmark, args.data_dir, params, Path(checkpoint["path"]), device)
    model = settings.MODEL_NAMES[args.benchmark]
    with atomic.atomic_dir(args.out) as tmp:
        sampler = _telemetry_start(tmp, args.telemetry_hz) if args.mode == "performance" else None
        start_ms = int(time.time() * 1000)
        try:
            run_loadgen(served.predict, served.count, model, args.scenario, args.mode, args.user_conf, tmp)
        finally:
            if sampler is not None:
                sampler.stop()
        stop_ms = int(time.time() * 1000)
        record: dict[str, Any] = {
            "benchmark": args.benchmark, "loadgen_model": model, "scenario": args.scenario, "mode": args.mode,
            "checkpoint": checkpoint, "shortened": args.shortened, "device": str(device),
            "wall_ms": stop_ms - start_ms, "samples": served.count,
        }
        if args.mode == "performance":
            record["summary"] = summary.read(tmp / "mlperf_log_summary.txt").as_dict()
        detail = summary.detail(tmp / "mlperf_log_detail.txt")
        record["detail_errors"] = detail["__errors__"]
        record["samples_issued"] = (int(detail.get("generated_query_count") or 0)
                                    * int(detail.get("generated_samples_per_query") or 0))
        if args.mode == "accuracy":
            reference = served.reference()
            value = served.accuracy(accuracy_responses(tmp / "mlperf_log_accuracy.json"))
            target = settings.QUALITY_FRACTION * reference
            record["accuracy"] = {"metric": served.metric, "value": value, "reference": reference,
                                  "target": target, "fraction": settings.QUALITY_FRACTION, "met": value >= target}
            atomic.write_text(tmp / "accuracy.txt",
                              f"accuracy={value:.3f}%, reference={reference:.3f}%, target={target:.3f}%\n"
                              f"hash={sha256_file(tmp / 'mlperf_log_accuracy.json')}\n")
        if sampler is not None:
            from mlrepro.telemetry import summarize

            record["telemetry"] = telemetry = summarize(tmp / "telemetry", start_ms, stop_ms)
            energy = telemetry.get("accelerator_energy_j")
            if energy is not None and record["samples_issued"]:
                record["energy_per_sample_j"] = energy / record["samples_issued"]
        atomic.write_json(tmp / RESULT, record)


if __name__ == "__main__":
    from mlrepro.runs import warm
    warm.hand_over(warm.INFERENCE)  # exits there where this invocation's warm parent runs LoadGen
    try:
        main()
    except (InferenceFailed, summary.SummaryError, ValueError) as e:
        sys.exit(f"error: {e}")
