"""One (benchmark, scenario, mode) through the official LoadGen, as one process (LoadGen reads its
settings once per process: a second FromConfig is logged as an invalid config): the inference_run rule's job.

The served weights are the checkpoint of the first converged run among its runs, verified against the sha256 its
run.json records. Its output folder receives LoadGen's own files and ``result.json``. A performance run first states
the SUT's latency or QPS as measured here (mlrepro/inference/calibrate.py; its LoadGen logs in calibration/ there)
and fails with one line when LoadGen still judges it INVALID.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.errors import MlreproError
from mlrepro.core.hashing import sha256_file
from mlrepro.core.job import Job
from mlrepro.inference import audit_tests, calibrate, rounds, summary
from mlrepro.inference.sut import start_test

RESULT = "result.json"
# An accuracy run issues every sample once and times nothing, but LoadGen still spaces Server queries by the
# stated rate, 1 query/s unless a user.conf states one: a 256-sample set took 256 s. Unstated, its queries
# arrive at this rate (the worker joins those that queue into batches).
ACCURACY_SERVER_QPS = 10_000.0


class InferenceFailed(MlreproError, RuntimeError):
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


def test_settings(user_conf: Path, model: str, scenario: str, mode: str, rnd: rounds.Round) -> Any:
    """LoadGen's settings for the timed run: its built-in mlperf.conf, then ``user_conf`` (once per process),
    then the declared round's seeds (LoadGen reads seeds from its built-in conf only, which is v6.1's)."""
    import mlperf_loadgen as lg

    ts = lg.TestSettings()
    code = ts.FromConfig(str(user_conf), model, scenario)
    if code != 0:
        raise InferenceFailed(f"{user_conf}: LoadGen could not read it for {model}.{scenario} (code {code})")
    for key, seed in rnd.seeds().items():
        setattr(ts, key, seed)
    ts.scenario = getattr(lg.TestScenario, scenario)
    ts.mode = lg.TestMode.AccuracyOnly if mode == "accuracy" else lg.TestMode.PerformanceOnly
    return ts


def invalid_message(model: str, scenario: str, verdict: summary.Summary, detail: dict[str, Any],
                    stated: calibrate.Calibration) -> str:
    """One line for a performance run LoadGen judged INVALID: model, scenario, LoadGen's reason, what to set."""
    unmet = [k for k, ok in verdict.constraints.items() if not ok]
    reason = "; ".join(([f"not satisfied: {', '.join(k.removesuffix(' satisfied') for k in unmet)}"] if unmet else [])
                       + detail["__errors__"]) or "Result is : INVALID"
    key, value = f"{model}.{scenario}.{stated.key}", f"{stated.value:.6g} {stated.unit}"
    ran_out = any("Ran out of generated queries" in e for e in detail["__errors__"])
    if "Performance constraints satisfied" in unmet:
        todo = f"a {key} below {value}"
    elif ran_out or "Min duration satisfied" in unmet:
        todo = f"a {key} {'above' if stated.key == 'target_qps' else 'below'} {value}"
    else:  # too few queries for early stopping or the minimum count
        todo = (f"a {model}.{scenario}.min_query_count above {detail.get('effective_min_query_count')}"
                + (f" or a {key} below {value}" if scenario == "Server" else ""))
    source = "calibrated" if stated.source == "calibrated" else f"from {stated.source}"
    return (f"{model} {scenario}: LoadGen says INVALID ({reason[:300]}) with {stated.key} {value} ({source}); "
            f"state {todo} in a user.conf given as inference.user_conf")


def accuracy_responses(path: Path) -> dict[int, bytes]:
    """LoadGen's accuracy log as qsl index -> bytes; a repeated index counts once, as the official scripts do."""
    responses: dict[int, bytes] = {}
    for entry in json.loads(path.read_text()):
        responses.setdefault(int(entry["qsl_idx"]), bytes.fromhex(entry["data"]))
    return responses


def accuracy_text(official: str, accuracy: dict[str, Any], log: Path) -> str:
    """accuracy.txt: the line the round's accuracy script prints for the model (the official checker reads it),
    ours with the reference and target (mlrepro/inference/check.py reads it), and the full log's hash."""
    return (f"{official}\n"
            f"mlrepro: {accuracy['metric']}: value={accuracy['value']:.6f}, reference={accuracy['reference']:.6f}, "
            f"target={accuracy['target']:.6f} ({accuracy['fraction']:.1%} of the reference)\n"
            f"hash={sha256_file(log)}\n")


def _telemetry_start(out_dir: Path, hz: float) -> Any:
    """The NVML sampler beside performance runs, only where a GPU is present."""
    from mlrepro.core import probe
    if hz <= 0 or not probe.gpus()["devices"]:
        return None
    from mlrepro.telemetry import start_sampler

    return start_sampler(out_dir / "telemetry", hz=hz, watch_pid=os.getpid())


def job(job: Job) -> None:
    """rules/inference.smk inference_run: wildcards ibench, scenario, mode; input runs (the benchmark's run.json
    files, in order) and conf (the user.conf); params data (the dataset's folder), spec (the benchmark's config),
    shortened (the user.conf lowers the official minimums), round, device, hz (telemetry); threads. Served by this
    invocation's warm parent, which imported torch once (mlrepro/jobs.py)."""
    try:
        _serve(job)
    except ValueError as e:  # LoadGen's settings; the project's own errors are one line already (MlreproError)
        sys.exit(f"error: {e}")


def audit_job(job: Job) -> None:
    """rules/inference_audit_tests.smk inference_audit_test: the round's audit tests of a served (benchmark,
    scenario) (mlrepro/inference/audit_tests.py), entered here so that this module's warm parent serves them too."""
    try:
        served, checkpoint, _ = load_served(job)
        audit_tests.audit(job, served, checkpoint, test_settings, accuracy_responses)
    except (ValueError, OSError) as e:  # the project's own errors are one line already (MlreproError)
        sys.exit(f"error: {e}")


def load_served(job: Job) -> tuple[Any, dict[str, Any], Any]:
    """The model a job serves (its input runs, params data, spec and device; threads): (served, checkpoint,
    device)."""
    import torch

    from mlrepro.inference import serve

    p = job.params
    torch.set_num_threads(job.threads)
    checkpoint = pick_checkpoint(job.input.many("runs"))
    device = torch.device("cuda" if p["device"] == "auto" and torch.cuda.is_available() else
                          ("cpu" if p["device"] == "auto" else p["device"]))
    return serve.load(job.wildcards["ibench"], Path(p["data"]), p["spec"], Path(checkpoint["path"]), device), \
        checkpoint, device


def _serve(job: Job) -> None:
    benchmark, scenario, mode = job.wildcards["ibench"], job.wildcards["scenario"], job.wildcards["mode"]
    user_conf, out, p = job.input["conf"], job.output.first, job.params
    served, checkpoint, device = load_served(job)
    rnd = rounds.get(p["round"])
    model = rnd.loadgen_model(benchmark)
    ts = test_settings(user_conf, model, scenario, mode, rnd)
    with atomic.atomic_dir(out) as tmp:
        stated = None
        if mode == "accuracy" and scenario == "Server" and calibrate.stated(
                user_conf.read_text(errors="replace"), model, "Server", "target_qps") is None:
            ts.server_target_qps = ACCURACY_SERVER_QPS
        if mode == "performance":  # accuracy runs issue every sample once: nothing to state
            stated = calibrate.calibrate(served.predict, served.count, model, scenario, user_conf, ts,
                                         tmp / "calibration")
            print(f"{model} {scenario}: {stated.key} = {stated.value:.6g} {stated.unit} ({stated.source}; "
                  f"measured {json.dumps(stated.measured)})", flush=True)
        while True:
            shutil.rmtree(tmp / "telemetry", ignore_errors=True)  # a rerun's telemetry is its own
            sampler = _telemetry_start(tmp, float(p["hz"])) if mode == "performance" else None
            start_ms = int(time.time() * 1000)
            try:
                start_test(served.predict, served.count, ts, tmp)
            finally:
                if sampler is not None:
                    sampler.stop()
            stop_ms = int(time.time() * 1000)
            detail = summary.detail(tmp / "mlperf_log_detail.txt")  # this run's: the rerun's judge and the record's
            if stated is None or not stated.retry(detail, ts.server_target_latency_percentile, ts):
                break
            rerun = stated.measured["timed_reruns"][-1]
            if scenario == "Server":
                print(f"{model} Server: {rerun['reason']} at {rerun['rate']:.6g} queries/s ({rerun['late_queries']} of "
                      f"{rerun['queries']} queries late); running it again at {stated.value:.6g} queries/s, "
                      f"{ts.min_query_count} queries at least", flush=True)
            else:
                print(f"{model} {scenario}: {rerun['reason']} with {stated.key} {rerun['value']:.6g} "
                      f"{stated.unit}; running it again with {stated.value:.6g} {stated.unit}", flush=True)
        record: dict[str, Any] = {
            "benchmark": benchmark, "round": rnd.name, "loadgen_model": model, "scenario": scenario, "mode": mode,
            "checkpoint": checkpoint, "shortened": bool(p["shortened"]), "device": str(device),
            "wall_ms": stop_ms - start_ms, "samples": served.count,
        }
        if stated is not None:
            verdict = summary.read(tmp / "mlperf_log_summary.txt")
            record["summary"] = verdict.as_dict()
            record["calibration"] = stated.as_dict()
            if not verdict.valid or detail["__errors__"]:
                print((tmp / "mlperf_log_summary.txt").read_text(errors="replace"), flush=True)
                raise InferenceFailed(invalid_message(model, scenario, verdict, detail, stated))
        record["detail_errors"] = detail["__errors__"]
        record["samples_issued"] = (int(detail.get("generated_query_count") or 0)
                                    * int(detail.get("generated_samples_per_query") or 0))
        if mode == "accuracy":
            reference = served.reference()
            value = served.accuracy(accuracy_responses(tmp / "mlperf_log_accuracy.json"))
            fraction = rnd.quality_fraction(benchmark)
            target = fraction * reference
            record["accuracy"] = {"metric": served.metric, "value": value, "reference": reference,
                                  "target": target, "fraction": fraction, "met": value >= target}
            atomic.write_text(tmp / "accuracy.txt", accuracy_text(served.accuracy_line(value), record["accuracy"],
                                                                  tmp / "mlperf_log_accuracy.json"))
        if sampler is not None:
            from mlrepro.telemetry import summarize

            record["telemetry"] = telemetry = summarize(tmp / "telemetry", start_ms, stop_ms)
            energy = telemetry.get("accelerator_energy_j")
            if energy is not None and record["samples_issued"]:
                record["energy_per_sample_j"] = energy / record["samples_issued"]
        atomic.write_json(tmp / RESULT, record)
