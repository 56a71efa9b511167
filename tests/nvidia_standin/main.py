"""A stand-in for NVIDIA's closed-division ``code/main.py`` (v4.1's interface), for CI machines without GPUs.

A test copies NVIDIA's folder and puts this file at ``code/main.py``: the folder's own Makefile then runs it as it
runs NVIDIA's (``python3 -m code.main $(RUN_ARGS) --action=...``, ``LOG_DIR`` exported). It parses the arguments
main.py parses (unknown ones ignored, as main.py's ``parse_known_args`` does), serves one of our mini models through
the real LoadGen instead of a TensorRT engine, and writes what NVIDIA's handlers write, where they write it:

- ``run_harness``: ``build/loadgen-configs/<system>/<benchmark>/<scenario>/`` (mlperf.conf copied from
  ``build/inference/mlperf.conf``, the user.conf the run reads, README.md, calibration_process.adoc, the system
  JSON: code/common/submission.py's generate_measurements_entry), LoadGen's logs with the trace in
  ``$LOG_DIR/<system>/<benchmark>/<scenario>/`` (harness.py's get_full_log_dir), ``metadata.json`` with the keys
  harness.py and run_harness.py record (result_validity, the scenario's metric, satisfies_query_constraint,
  effective_*, system_name, benchmark_full, test_mode, config_name, summary_string; accuracy runs add accuracy,
  accuracy_pass and ``accuracy.txt``) -- the keys scripts/update_results reads to pick runs.
- ``run_audit_harness``: the same run in ``build/compliance_logs/<TEST>/...`` (run_audit.py) with the round's
  ``audit.config`` copied into the working folder (LoadGen reads it there), then the round's own
  ``run_verification.py`` against the staged results (auditing.py's arguments), its output in ``<TEST>/`` beside
  the logs, and ``audit_test``/``audit_success`` added to metadata.json.

What it stands in for is named in every file it writes that a reader could take for NVIDIA's (tensorrt_version,
README.md). Its settings come from the JSON file ``$MLREPRO_NVIDIA_STANDIN`` names: ``system_id``,
``query_constraints`` (per scenario the round's minimum that harness.py takes from the checker: samples per Offline
query, queries otherwise), ``min_duration_ms``, ``min_query_count`` (per scenario: a shortened run's, enough for
LoadGen's early stopping), and per NVIDIA benchmark name the mini serving it (``mini``, ``data``,
``params``, ``checkpoint``).

- ``generate_engines``: its "engine" for each (benchmark, scenario): the accelerator it emulates (``Device``), a
  fixed service time per call set once from the mini's speed on this machine, in
  ``build/engines/<system>/<benchmark>/<scenario>/standin-device.json``; a run without one is refused, as harness.py
  refuses a missing engine. Every run of the engine serves at that time (the audits compare their runs' timing
  with the performance run's), with the node to itself where the machine allows it (``dedicate``).

Scenarios: Offline, SingleStream, MultiStream and Server (Poisson arrivals; the audits' own
``--server_target_qps_adj_factor`` scales the stated rate as NVIDIA's audit targets ask).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

# v4.1's audit tests, and the benchmarks each exempts (code/actionhandler/run_audit.py's is_exempt)
AUDIT_TESTS = ("TEST01", "TEST04", "TEST05", "TEST06")
EXEMPT = {"TEST04": {"bert", "dlrm-v2", "3d-unet", "retinanet", "gptj", "llama2-70b", "mixtral-8x7b"},
          "TEST05": {"gptj", "llama2-70b", "mixtral-8x7b", "stable-diffusion-xl"},
          "TEST01": {"gptj", "llama2-70b", "mixtral-8x7b"}}
ACTIONS = ("generate_conf_files", "generate_engines", "calibrate", "run_harness", "run_audit_harness")
# harness.py's get_loadgen_log_keys and QUERY_METRIC_CONSTRAINTS for the scenarios served
SCENARIO_KEY = {"Offline": "result_samples_per_second", "SingleStream": "result_90.00_percentile_latency_ns",
                "MultiStream": "result_99.00_percentile_per_query_latency_ns",
                "Server": "result_completed_samples_per_sec"}
QUERY_METRIC = {"Offline": "effective_samples_per_query", "SingleStream": "effective_min_query_count",
                "MultiStream": "effective_min_query_count", "Server": "effective_min_query_count"}
SERVER_LOAD = 0.25  # Server's stated arrival rate, as a share of what the device serves a query at a time
MS_SAMPLES = 8  # LoadGen's samples per MultiStream query
BATCH = 1024  # samples per call of the mini


def parse_main_args(argv: list[str]) -> dict[str, Any]:
    """main.py's MainArgs and the harness fields the Makefile passes (unknown flags ignored, as main.py does)."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--action", required=True, choices=ACTIONS)
    p.add_argument("--benchmarks")
    p.add_argument("--scenarios")
    p.add_argument("--test_mode", default="PerformanceOnly",
                   choices=["SubmissionRun", "AccuracyOnly", "PerformanceOnly", "FindPeakPerformance"])
    p.add_argument("--audit_test", choices=AUDIT_TESTS)
    p.add_argument("--no_audit_verify", action="store_true")
    p.add_argument("--system_name")
    p.add_argument("--log_dir", default=os.environ.get("LOG_DIR", "build/logs/default"))
    p.add_argument("--server_target_qps_adj_factor", type=float)
    p.add_argument("--harness_type", default="auto")
    p.add_argument("--accuracy_target", type=float, default=0.99)
    p.add_argument("--power_setting", default="MaxP")
    p.add_argument("--config_ver")
    return vars(p.parse_known_args(argv)[0])


def loadgen_detail(log_dir: Path) -> dict[str, Any]:
    """mlperf_log_detail.txt's MLLOG entries as key -> value (the last of a key wins, as NVIDIA's reader)."""
    values: dict[str, Any] = {}
    for line in (log_dir / "mlperf_log_detail.txt").read_text().splitlines():
        if line.startswith(":::MLLOG "):
            entry = json.loads(line[len(":::MLLOG "):])
            values[entry["key"]] = entry["value"]
    return values


class StandIn:
    def __init__(self, args: dict[str, Any], conf: dict[str, Any]) -> None:
        self.args, self.conf = args, conf
        self.system = args["system_name"] or f"{conf['system_id']}_TRT"

    def measurements(self, benchmark: str, scenario: str, samples: int, rate: float) -> Path:
        """generate_measurements_entry: the folder LoadGen's configs are written to, and staged from."""
        out = Path("build/loadgen-configs") / self.system / benchmark / scenario
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile("build/inference/mlperf.conf", out / "mlperf.conf")
        lines = [f"*.{scenario}.target_qps = {rate}" if scenario in ("Offline", "Server")
                 else f"*.{scenario}.target_latency = {1000 / rate * (MS_SAMPLES if scenario == 'MultiStream' else 1)}",
                 f"*.{scenario}.performance_sample_count_override = {samples}",
                 f"*.{scenario}.min_duration = {self.conf['min_duration_ms']}"]
        if scenario in self.conf["min_query_count"]:
            lines.append(f"*.{scenario}.min_query_count = {self.conf['min_query_count'][scenario]}")
        (out / "user.conf").write_text("\n".join(lines) + "\n")
        run = f'RUN_ARGS="--benchmarks={benchmark} --scenarios={scenario} --test_mode=%s"'
        (out / "README.md").write_text(
            "mlrepro's CI stand-in for NVIDIA's harness (tests/nvidia_standin/main.py): one of mlrepro's mini models "
            "served through LoadGen in code/main.py's place, in a copy of NVIDIA's folder.\n\n```\n"
            f"make run_harness {run % 'AccuracyOnly'}\nmake run_harness {run % 'PerformanceOnly'}\n```\n")
        (out / "calibration_process.adoc").write_text(
            "The mini's samples per second measured on this machine before the run; no quantization.\n")
        (out / f"{self.system}_{scenario}.json").write_text(json.dumps({
            "input_data_types": "fp32", "retraining": "No", "starting_weights_filename": "mlrepro mini checkpoint",
            "weight_data_types": "fp32", "weight_transformations": "No"}, indent=4))
        return out

    def rate(self, device: Device, scenario: str) -> float:
        """Samples per second to state: Offline's at the device's rate (at least what holds the round's samples in
        the minimum duration), the others' a query at a time, 4 x the device's so that LoadGen schedules enough
        queries for the minimum duration (they take the device's time whatever is stated); Server's Poisson arrivals
        at a quarter of what the device serves a query at a time, so that queueing keeps within the latency bound."""
        if scenario == "Server":
            return SERVER_LOAD / device.service(1)
        if scenario != "Offline":
            n = MS_SAMPLES if scenario == "MultiStream" else 1
            return 4 * n / device.service(n)
        secs = self.conf["min_duration_ms"] / 1000
        return max(device.rate, math.ceil(self.conf["query_constraints"]["Offline"] / 1.1 / secs))

    def engine(self, benchmark: str, scenario: str) -> Path:
        """Where generate_engines puts the (benchmark, scenario)'s engine: build/engines/<system>/<bm>/<scenario>."""
        return Path("build/engines") / self.system / benchmark / scenario / "standin-device.json"

    def served(self, benchmark: str) -> Any:
        import torch

        from mlrepro.inference import serve

        bconf = self.conf["benchmarks"].get(benchmark)
        if bconf is None:
            raise SystemExit(f"stand-in: no mini serves {benchmark} (served: {', '.join(self.conf['benchmarks'])})")
        return serve.load(bconf["mini"], Path(bconf["data"]), json.loads(Path(bconf["params"]).read_text()),
                          Path(bconf["checkpoint"]), torch.device("cpu"))

    def generate_engine(self, benchmark: str, scenario: str) -> None:
        """generate_engines: the stand-in's "engine" is the device it emulates, fixed once from the mini's speed on
        this machine (every run of the (benchmark, scenario) then has the same service time, as every run of a
        TensorRT engine runs the same kernels)."""
        if scenario not in SCENARIO_KEY:
            raise SystemExit(f"stand-in: scenario {scenario} is not served (served: {', '.join(SCENARIO_KEY)})")
        dedicate()
        served = self.served(benchmark)
        device = Device.measure(served.predict, served.count, scenario)
        path = self.engine(benchmark, scenario)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"rate": device.rate, "latency_s": device.latency_s}, indent=1))
        print(f"stand-in: engine {path}: {device}")

    def run(self, benchmark: str, scenario: str, log_root: Path) -> tuple[Path, dict[str, Any]]:
        """One LoadGen test of the mini serving ``benchmark``; its logs and metadata.json in the full log dir."""
        import mlperf_loadgen as lg

        from mlrepro.inference import sut

        if scenario not in SCENARIO_KEY:
            raise SystemExit(f"stand-in: scenario {scenario} is not served (served: {', '.join(SCENARIO_KEY)})")
        engine = self.engine(benchmark, scenario)
        if not engine.is_file():  # as harness.py refuses a missing engine
            raise SystemExit(f"stand-in: no engine {engine}: run `make generate_engines` for {benchmark} {scenario}")
        device = Device(**json.loads(engine.read_text()))
        dedicate()  # before any thread is made: LoadGen's and the SUT's inherit it
        served = self.served(benchmark)
        # the accuracy run and the audits run at the performance run's settings (its user.conf, where there is one)
        mdir = Path("build/loadgen-configs") / self.system / benchmark / scenario
        if (self.args["test_mode"] == "PerformanceOnly" and not self.args["audit_test"]) or \
                not (mdir / "user.conf").is_file():
            mdir = self.measurements(benchmark, scenario, served.count, self.rate(device, scenario))
        predict = device.paced(served.predict)
        warm_up(predict, served.count, scenario)  # a fresh process's first calls: before LoadGen's clock
        log_dir = log_root / self.system / benchmark / scenario  # harness.py get_full_log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        ts = lg.TestSettings()
        if ts.FromConfig(str(mdir / "user.conf"), benchmark, scenario) != 0:
            raise SystemExit(f"stand-in: LoadGen could not read {mdir / 'user.conf'}")
        ts.scenario = getattr(lg.TestScenario, scenario)
        if scenario == "Server" and self.args["server_target_qps_adj_factor"]:  # the audits' (run_audit_test*)
            ts.server_target_qps *= self.args["server_target_qps_adj_factor"]
        mode = self.args["test_mode"]
        ts.mode = lg.TestMode.AccuracyOnly if mode == "AccuracyOnly" else lg.TestMode.PerformanceOnly
        log = lg.LogSettings()
        log.log_output.outdir = str(log_dir)
        log.log_output.copy_summary_to_stdout = True
        log.enable_trace = True  # scripts/update_results stages only runs with mlperf_log_trace.json
        handle = sut.QueueSUT(predict, BATCH)
        qsl = lg.ConstructQSL(served.count, served.count, lambda idx: None, lambda idx: None)
        gc.collect()  # no collector pauses inside LoadGen's clock (a device has none; its few objects are freed)
        gc.disable()
        try:
            lg.StartTestWithLogSettings(handle.handle, qsl, ts, log)
        finally:
            gc.enable()
            lg.DestroyQSL(qsl)
            handle.close()
        detail = loadgen_detail(log_dir)
        key, query_key = SCENARIO_KEY[scenario], QUERY_METRIC[scenario]
        md: dict[str, Any] = {
            "result_validity": detail.get("result_validity"), key: detail.get(key),
            "early_stopping_met": detail.get("early_stopping_met"), query_key: detail.get(query_key),
            "effective_min_duration_ms": detail.get("effective_min_duration_ms"),
            "system_name": self.system, "benchmark_short": benchmark, "benchmark_full": benchmark,
            "scenario": scenario, "test_mode": mode, "scenario_key": key,
            "tensorrt_version": "none: mlrepro stand-in (mini model on CPU, no TensorRT)",
            "detected_system": "mlrepro stand-in", "satisfies_query_constraint":
                float(detail.get(query_key) or 0) >= self.conf["query_constraints"][scenario],
            "config_name": f"{self.system}-{benchmark}-{scenario}"}
        md["summary_string"] = f"{key}: {md[key]}, Result is {md['result_validity']}"
        if mode == "AccuracyOnly":
            from mlrepro.inference.run import accuracy_responses

            value = served.accuracy(accuracy_responses(log_dir / "mlperf_log_accuracy.json"))
            reference = served.reference()
            threshold = self.args["accuracy_target"] * reference  # the mini's own FP32 metric, as ours holds it
            md["accuracy"] = [{"name": served.metric, "value": value, "threshold": threshold,
                               "pass": value >= threshold}]
            md["accuracy_pass"] = value >= threshold
            md["summary_string"] = f"[{'PASSED' if md['accuracy_pass'] else 'FAILED'}] {served.metric}: {value:.3f}"
            (log_dir / "accuracy.txt").write_text(served.accuracy_line(value) + "\n")
        (log_dir / "metadata.json").write_text(json.dumps(md, indent=4, sort_keys=True))
        return log_dir, md

    def audit(self, test: str, benchmark: str, scenario: str) -> None:
        """run_audit.py: the audit run in its own log folder, audit.config in the working folder, then verified."""
        if benchmark in EXEMPT.get(test, ()) or (test == "TEST06") != (benchmark in {"llama2-70b", "mixtral-8x7b"}):
            print(f"=> Compliance test {test} is exempted for {benchmark}-{scenario}.")
            return
        config = audit_config(test, benchmark)
        shutil.copyfile(config, "audit.config")
        try:
            log_dir, _ = self.run(benchmark, scenario, Path("build/compliance_logs") / test)
        finally:
            os.unlink("audit.config")
        if self.args["no_audit_verify"]:
            success: Any = "unverified"
        else:
            success = self.verify(test, config.parent, log_dir, benchmark, scenario)
        md = json.loads((log_dir / "metadata.json").read_text())
        md.update(audit_test=test, audit_success=success)
        (log_dir / "metadata.json").write_text(json.dumps(md, indent=4, sort_keys=True))
        if success is False:  # run_audit.py's handle_failure: the Makefile's retries run it again
            raise SystemExit(f"stand-in: {test} verification failed for {benchmark} {scenario}")

    def verify(self, test: str, test_dir: Path, log_dir: Path, benchmark: str, scenario: str) -> bool:
        """auditing.py's verifier call with the round's run_verification.py (its output in <log_dir>/<test>/)."""
        submitter = os.environ.get("SUBMITTER", "NVIDIA")
        results = Path("build/submission-staging/closed") / submitter / "results" / self.system / benchmark / scenario
        script = test_dir / "run_verification.py" if (test_dir / "run_verification.py").is_file() \
            else test_dir.parent / "run_verification.py"
        argv = [sys.executable, str(script), f"--results_dir={results.resolve()}",
                f"--compliance_dir={log_dir.resolve()}", f"--output_dir={log_dir.resolve()}"]
        proc = subprocess.run(argv, capture_output=True, text=True)
        print(proc.stdout + proc.stderr)
        for name in ("verify_accuracy.txt", "verify_performance.txt", "mlperf_log_accuracy_baseline.json",
                     "accuracy.txt", "predictions.json"):  # auditing.py's cleanup() of the working folder
            Path(name).unlink(missing_ok=True)
        out = proc.stdout
        if test == "TEST01":
            return "Accuracy check pass: True" in out and "Performance check pass: True" in out
        return proc.returncode == 0 and "Performance check pass: True" in out


def calibrate(predict: Any, count: int, batch: int, seconds: float = 0.5) -> float:
    """Samples per second the mini serves in calls of ``batch`` samples, measured for ``seconds``."""
    indices = np.arange(batch) % count
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        predict(indices)
        done += batch
    return done / elapsed


@dataclass(frozen=True)
class Device:
    """The accelerator the stand-in emulates: a call of n samples takes ``latency_s + n / rate`` seconds, one call
    at a time, whatever the CPU's own time for it (it computes the mini's answers in that time and waits out the
    rest). A GPU's service time does not move with the host's other work; a shared CPU's does, and the audits
    compare an audit run's timing with the performance run's (within 10 or 20 %): the device gives every run of
    an engine the same service, so that they measure the harness, not the machine's load. Fixed once per engine
    from the mini's speed here, with headroom, and a floor per scenario that scheduling jitter stays well under."""

    rate: float  # samples per second
    latency_s: float  # per call

    HEADROOM: ClassVar[float] = 1.25  # the device's time over the CPU's own
    LATENCY_FLOOR_S: ClassVar[dict[str, float]] = {"SingleStream": 0.008, "MultiStream": 0.003, "Server": 0.0005,
                                                   "Offline": 0.0}

    @classmethod
    def measure(cls, predict: Any, count: int, scenario: str) -> Device:
        rate = calibrate(predict, count, BATCH)
        n = MS_SAMPLES if scenario == "MultiStream" else 1
        per_call = sorted(_timed(predict, np.arange(n) % count) for _ in range(51))[25]
        return cls(rate=rate / cls.HEADROOM,
                   latency_s=max(cls.LATENCY_FLOOR_S[scenario], cls.HEADROOM * per_call - n / rate))

    def service(self, n: int) -> float:
        return self.latency_s + n / self.rate

    def paced(self, predict: Any) -> Any:
        free_at = 0.0

        def call(indices: np.ndarray) -> Any:
            nonlocal free_at
            start = max(time.perf_counter(), free_at)  # one call at a time, as a device's queue
            out = predict(indices)
            done = start + self.service(len(indices))
            if (wait := done - time.perf_counter()) > 0:
                time.sleep(wait)
            free_at = max(done, time.perf_counter())
            return out

        return call


def _timed(predict: Any, indices: np.ndarray) -> float:
    start = time.perf_counter()
    predict(indices)
    return time.perf_counter() - start


def warm_up(predict: Any, count: int, scenario: str) -> None:
    """A few calls of the size the run makes (a fresh process's first calls allocate)."""
    n = {"Offline": BATCH, "MultiStream": MS_SAMPLES}.get(scenario, 1)
    for _ in range(3):
        predict(np.arange(n) % count)


def dedicate() -> None:
    """The node to itself, as NVIDIA's harness has its GPUs: real-time round-robin scheduling for this process
    where the machine allows it (root with CAP_SYS_NICE), so that other processes on a shared CPU do not stall its
    queries; the threads made afterwards (LoadGen's, the SUT's) inherit it."""
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
    except (PermissionError, AttributeError, OSError) as exc:
        print(f"stand-in: not dedicated ({exc}): other processes share its CPU and stall its queries")


def audit_config(test: str, benchmark: str) -> Path:
    """The round's audit.config for ``benchmark``: v4.1's compliance/nvidia/<TEST>/ (auditing.py's load) where the
    checkout has it, else the same test in the layout mlcommons/inference has had since (compliance/<TEST>/)."""
    root = Path("build/inference/compliance")
    for base in (root / "nvidia" / test, root / test):
        for path in (base / benchmark / "audit.config", base / "audit.config"):
            if path.is_file():
                return path.resolve()
    raise SystemExit(f"stand-in: no audit.config for {test} {benchmark} under {root}")


def main(argv: list[str]) -> int:
    args = parse_main_args(argv)
    conf_path = os.environ.get("MLREPRO_NVIDIA_STANDIN")
    if not conf_path:
        raise SystemExit("stand-in: set MLREPRO_NVIDIA_STANDIN to the JSON file of its settings")
    standin = StandIn(args, json.loads(Path(conf_path).read_text()))
    pairs = [(b, s) for b in filter(None, (args["benchmarks"] or "").split(","))
             for s in filter(None, (args["scenarios"] or "").split(","))]
    if args["action"] == "generate_engines":  # no LoadGen: every pair in this process
        for benchmark, scenario in pairs:
            standin.generate_engine(benchmark, scenario)
        return 0
    if len(pairs) > 1:  # one process each, as NVIDIA's harness runs (LoadGen reads its settings once per process)
        rest = [a for a in argv if not a.startswith(("--benchmarks", "--scenarios"))]
        for benchmark, scenario in pairs:
            argv1 = [sys.executable, "-m", "code.main", f"--benchmarks={benchmark}", f"--scenarios={scenario}", *rest]
            if subprocess.run(argv1).returncode != 0:
                raise SystemExit(f"stand-in: {benchmark} {scenario} failed")
        return 0
    for benchmark, scenario in pairs:
        if args["action"] == "run_harness":
            standin.run(benchmark, scenario, Path(args["log_dir"]))
        elif args["action"] == "run_audit_harness":
            if not args["audit_test"]:
                raise SystemExit("stand-in: run_audit_harness needs --audit_test")
            standin.audit(args["audit_test"], benchmark, scenario)
        else:
            print(f"stand-in: {args['action']} has nothing to do without TensorRT")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
