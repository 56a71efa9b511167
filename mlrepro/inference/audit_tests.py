"""The audit tests of the declared round for one served (benchmark, scenario): the inference_audit_test rule's job.

A test (mlrepro/inference/rounds.py ``Audits``: TEST01, TEST04 and TEST05 at v2.0; TEST01 and TEST04 at v6.1, as
the round's checker requires them of the model) is one or more LoadGen performance runs, each in a working folder
of its own holding its ``audit.config`` (LoadGen reads it over the submission's settings, all but the seeds,
which are set by hand as for every run), then the round's verification. The settings are the submission run's:
its user.conf, the round's seeds and the statement its calibration made.

- With ``inference.mlcommons_inference`` (a checkout of mlcommons/inference at the round's tag) its files are used
  as they ship: the test's ``audit.config`` copied byte for byte, and its ``run_verification.py`` run on copies of
  the logs, in a folder of fixed names (the scripts hand their paths to a shell).
- Without it, ours: the round's ``audit.config`` written from rounds.py, named as ours, and the verification of
  mlrepro/inference/audit_verify.py.

A test whose performance check fails runs again, TRIES times in all (NVIDIA's flow retries TEST01 and TEST05
twice, TEST04 three times). A TEST01 whose logged responses differ from the accuracy run's (non-determinism the
rules allow) takes the rules' fallback: the accuracy script's result on the accuracy run's responses to the same
samples (``baseline_accuracy.txt``) and on the audit run's (``compliance_accuracy.txt``) must be within the
model's accuracy margin (1% for the 99% models). The output folder holds ``runs/<run>/`` (audit.config and
LoadGen's files), ``compliance/`` (what run_verification.py writes: the folders the checker reads), and
``result.json``. A failed test fails the job, unless the runs are shortened (not submittable: the package then
carries the failure, for the checker to report).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlrepro.core import atomic
from mlrepro.core.errors import MlreproError
from mlrepro.core.job import Job
from mlrepro.inference import audit_verify, calibrate, rounds
from mlrepro.inference.sut import BATCH, start_test

TRIES = 3
RESULT = "result.json"
LOGS = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")
OFFICIAL_TIMEOUT_S = 600
WARM_UP_CALLS = 5


class AuditTestError(MlreproError, RuntimeError):
    pass


def audit_config(rnd: rounds.Round, run_name: str, benchmark: str) -> str:
    """Ours: the round's audit.config for ``run_name`` (TEST01, TEST04-A, ...) and ``benchmark``."""
    audits = _audits(rnd)
    model = rnd.loadgen_model(benchmark)
    return (f"# written by mlrepro (ours, not the official file): MLPerf Inference {rnd.name} {run_name} for {model}, "
            f"the values of mlcommons/inference {audits.folder}/{official_name(rnd, run_name, benchmark)}\n"
            + audits.audit_config(run_name, model))


def official_name(rnd: rounds.Round, run_name: str, benchmark: str) -> str:
    """Where ``run_name``'s audit.config lies under the round's compliance folder (TEST01: one per model)."""
    return f"{run_name}/{rnd.loadgen_model(benchmark)}/audit.config" if run_name == "TEST01" else \
        f"{run_name}/audit.config"


def _audits(rnd: rounds.Round) -> rounds.Audits:
    if rnd.audits is None:
        raise AuditTestError(f"inference.round {rnd.name}: mlrepro knows no audit tests of this round")
    return rnd.audits


def official_file(checkout: Path, rnd: rounds.Round, run_name: str, benchmark: str) -> Path:
    """The audit.config of a checkout of mlcommons/inference; a clear error when it is not there."""
    path = checkout / _audits(rnd).folder / official_name(rnd, run_name, benchmark)
    if path.is_symlink() or not path.is_file():
        raise AuditTestError(f"inference.mlcommons_inference {checkout}: no {path.relative_to(checkout)} (a regular "
                             f"file); check out mlcommons/inference at the {rnd.name} tag there, or leave the key out "
                             "to use mlrepro's own audit files")
    return path


def stage_official(checkout: Path, rnd: rounds.Round, test: str, dest: Path) -> Path:
    """Copies of ``test``'s scripts (and tools/submission/log_parser.py, which v6.1's import) under ``dest``, in
    the checkout's layout; the run_verification.py to run. The scripts hand their paths to a shell: these are
    made of fixed names only."""
    audits = _audits(rnd)
    first = audits.runs[test][0]  # v2.0's TEST04 is verified from TEST04-A's folder
    src = checkout / audits.folder / first
    script = src / "run_verification.py"
    if script.is_symlink() or not script.is_file():
        raise AuditTestError(f"inference.mlcommons_inference {checkout}: no {script.relative_to(checkout)}")
    for path in sorted(src.glob("*.py")):
        if path.is_file() and not path.is_symlink():
            target = dest / audits.folder / first / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    parser = checkout / "tools" / "submission" / "log_parser.py"
    if parser.is_file() and not parser.is_symlink():
        (dest / "tools" / "submission").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(parser, dest / "tools" / "submission" / "log_parser.py")
    return dest / audits.folder / first / "run_verification.py"


def stage_results(performance: Path, accuracy: Path, dest: Path) -> Path:
    """The submission's logs as run_verification.py reads a results scenario folder (performance/run_1/,
    accuracy/): copies of the runs' files, the accuracy log whole."""
    (dest / "performance" / "run_1").mkdir(parents=True)
    (dest / "accuracy").mkdir(parents=True)
    for name in LOGS:
        shutil.copyfile(performance / name, dest / "performance" / "run_1" / name)
    shutil.copyfile(accuracy / "mlperf_log_accuracy.json", dest / "accuracy" / "mlperf_log_accuracy.json")
    return dest


def _copy_logs(src: Path, dest: Path, accuracy: bool = False) -> None:
    (dest / "performance" / "run_1").mkdir(parents=True, exist_ok=True)
    for name in LOGS:
        shutil.copyfile(src / name, dest / "performance" / "run_1" / name)
    if accuracy:
        (dest / "accuracy").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / "mlperf_log_accuracy.json", dest / "accuracy" / "mlperf_log_accuracy.json")


def verify_ours(rnd: rounds.Round, test: str, benchmark: str, results: Path, runs: Path, out: Path) -> dict[str, bool]:
    """The round's run_verification.py, ours: verdicts, and its files written under ``out`` as it writes them."""
    audits = _audits(rnd)
    ref = results / "performance" / "run_1"
    v6 = audits.scripts == "v6.1"
    verdicts: dict[str, audit_verify.Verdict] = {}
    if test == "TEST01":
        verdicts["accuracy"] = audit_verify.accuracy(results / "accuracy" / "mlperf_log_accuracy.json",
                                                     runs / "TEST01" / "mlperf_log_accuracy.json",
                                                     audit_verify.DTYPES[benchmark], need_match=v6)
        verdicts["performance"] = (
            audit_verify.performance_detail(ref / "mlperf_log_detail.txt", runs / "TEST01" / "mlperf_log_detail.txt")
            if v6 else audit_verify.performance_summary(ref / "mlperf_log_summary.txt",
                                                        runs / "TEST01" / "mlperf_log_summary.txt", 0.10, True))
    elif test == "TEST05":
        verdicts["performance"] = audit_verify.performance_summary(
            ref / "mlperf_log_summary.txt", runs / "TEST05" / "mlperf_log_summary.txt", 0.05, False)
    elif test == "TEST04" and v6:
        verdicts["performance"] = audit_verify.test04_same(ref / "mlperf_log_summary.txt",
                                                           runs / "TEST04" / "mlperf_log_summary.txt")
    elif test == "TEST04":
        verdicts["performance"] = audit_verify.test04_unique_same(runs / "TEST04-A" / "mlperf_log_summary.txt",
                                                                  runs / "TEST04-B" / "mlperf_log_summary.txt")
    else:
        raise AuditTestError(f"{rnd.name} {test}: mlrepro has no verification of this test")
    first = audits.runs[test][0]
    for kind, verdict in verdicts.items():
        atomic.write_text(out / first / f"verify_{kind}.txt", verdict.text)
    for name in audits.runs[test]:
        _copy_logs(runs / name, out / name, accuracy=name == "TEST01")
    return {kind: v.passed for kind, v in verdicts.items()}


def verify_official(script: Path, test: str, benchmark: str, work: Path, results: Path, runs: Path,
                    out: Path) -> dict[str, bool]:
    """The checkout's run_verification.py as it ships, from ``work`` (it writes verify_*.txt there and copies
    them under ``out``); verdicts as the checker reads them: a TEST PASS line."""
    work.mkdir(parents=True)
    rel = lambda p: os.path.relpath(p, work)  # noqa: E731 - fixed names only reach the scripts' shell commands
    if test == "TEST04" and script.parent.name == "TEST04-A":
        args = ["-a", rel(runs / "TEST04-A"), "-b", rel(runs / "TEST04-B"), "-o", rel(out)]
    else:
        args = ["-r", rel(results), "-c", rel(runs / test), "-o", rel(out)]
        if test == "TEST01":
            args += ["--dtype", audit_verify.DTYPES[benchmark]]
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    proc = subprocess.run([sys.executable, rel(script), *args], cwd=work, env=env, capture_output=True, text=True,
                          timeout=OFFICIAL_TIMEOUT_S)
    atomic.write_text(work / "run_verification.log", proc.stdout + proc.stderr)
    print(f"{script.parent.name}/run_verification.py exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}",
          flush=True)
    # each verify_*.txt is written in the working folder first, then copied: v2.0's scripts stop before the copy
    # when a check fails (their grep for PASS raises), so the verdict is read where it was written, and the copy,
    # which the checker reads, must be there too
    decided, copied = official_verdicts(work, test), out / script.parent.name
    return {kind: decided.get(kind, False) and _passes(copied / f"verify_{kind}.txt") for kind in _kinds(test)}


def _kinds(test: str) -> tuple[str, ...]:
    return ("accuracy", "performance") if test == "TEST01" else ("performance",)


def official_verdicts(work: Path, test: str) -> dict[str, bool]:
    """What the official scripts decided, from the files they write in their working folder: the checks they
    reached (v2.0's TEST01 stops after a failed accuracy check)."""
    return {kind: _passes(work / f"verify_{kind}.txt") for kind in _kinds(test)
            if (work / f"verify_{kind}.txt").is_file()}


def _passes(path: Path) -> bool:
    return path.is_file() and not path.is_symlink() and audit_verify.PASS in path.read_text(errors="replace")


def accuracy_fallback(served: Any, rnd: rounds.Round, benchmark: str, everything: dict[int, bytes],
                      test: dict[int, bytes], out: Path) -> dict[str, Any]:
    """TEST01's fallback where responses differ: the model's accuracy on the accuracy run's responses
    (``everything``, qsl index -> bytes) to the samples the audit logged (``test``) (baseline) and on the audit's
    (compliance), and their difference against the model's margin; the files the checker then reads, under ``out``
    (TEST01/accuracy/)."""
    baseline = {i: everything[i] for i in test if i in everything}
    base, comp = served.accuracy(baseline), served.accuracy(test)
    allowed = round((1 - rnd.quality_fraction(benchmark)) * 100, 6)
    delta = abs(1 - base / comp) * 100 if comp else float("inf")
    atomic.write_text(out / "baseline_accuracy.txt", served.accuracy_line(base) + "\n")
    atomic.write_text(out / "compliance_accuracy.txt", served.accuracy_line(comp) + "\n")
    atomic.write_text(out / "accuracy.txt", served.accuracy_line(comp) + "\n")
    return {"baseline": base, "compliance": comp, "samples": len(baseline), "delta_percent": delta,
            "allowed_percent": allowed, "passed": bool(base and comp and delta <= allowed)}


def set_seeds(ts: Any, audit_text: str, model: str, scenario: str, seeds: dict[str, int]) -> None:
    """The seeds an audit.config states (TEST05), else ``seeds`` (the round's), set on ``ts`` by hand: LoadGen
    reads seeds from its built-in mlperf.conf only and ignores them in an audit.config (seen with 6.0.17: a
    TEST05 run kept the submission's seeds)."""
    for key, seed in seeds.items():
        setattr(ts, key, int(calibrate.stated(audit_text, model, scenario, key) or seed))


def warm_up(served: Any) -> None:
    """A few model calls before a test, as the submission run had its calibration before it: a cold first call
    (allocations, lazy initialisation) would otherwise weigh on a short test, most on TEST04-A's one Offline query
    of the performance sample count."""
    batch = np.arange(min(BATCH, served.count), dtype=np.int64)
    for _ in range(WARM_UP_CALLS):
        served.predict(batch)


def _settings(job: Job, rnd: rounds.Round, benchmark: str, scenario: str, test_settings: Callable[..., Any]) -> Any:
    """The submission run's settings: its user.conf, the round's seeds and what its calibration stated."""
    ts = test_settings(job.input["conf"], rnd.loadgen_model(benchmark), scenario, "performance", rnd)
    stated = json.loads((job.input["performance"] / RESULT).read_text()).get("calibration")
    if stated:
        names = {f.name for f in dataclasses.fields(calibrate.Calibration)}
        calibrate.Calibration(**{k: v for k, v in stated.items() if k in names}).apply(ts)
    return ts


def audit(job: Job, served: Any, checkpoint: dict[str, Any], test_settings: Callable[..., Any],
          responses: Callable[[Path], dict[int, bytes]]) -> None:
    """rules/inference_audit_tests.smk inference_audit_test (entered by mlrepro/inference/run.py audit_job, whose
    warm parent serves it): wildcards ibench, scenario, test; input runs (the training runs' records), conf
    (user.conf), performance and accuracy (the submission's runs); params data, spec, device, round, shortened,
    mlcommons (a checkout of mlcommons/inference, or empty: ours). ``served`` and ``checkpoint``: the model;
    ``test_settings`` and ``responses``: run.py's, which read the settings and an accuracy log."""
    benchmark, scenario, test = job.wildcards["ibench"], job.wildcards["scenario"], job.wildcards["test"]
    p = job.params
    rnd = rounds.get(p["round"])
    audits = _audits(rnd)
    if test not in audits.tests(rnd.model(benchmark)):
        raise AuditTestError(f"{rnd.name} requires no {test} of {rnd.model(benchmark)}")
    checkout = Path(p["mlcommons"]).resolve() if p.get("mlcommons") else None
    ts = _settings(job, rnd, benchmark, scenario, test_settings)
    with atomic.atomic_dir(job.output.first) as tmp:
        results = stage_results(job.input["performance"], job.input["accuracy"], tmp / "verification" / "results")
        script = stage_official(checkout, rnd, test, tmp / "mlcommons") if checkout else None
        tries: list[dict[str, bool]] = []
        while True:
            for name in audits.runs[test]:
                work = tmp / "runs" / name
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir(parents=True)
                if checkout:
                    shutil.copyfile(official_file(checkout, rnd, name, benchmark), work / "audit.config")
                else:
                    atomic.write_text(work / "audit.config", audit_config(rnd, name, benchmark))
                set_seeds(ts, (work / "audit.config").read_text(errors="replace"), rnd.loadgen_model(benchmark),
                          scenario, rnd.seeds())
                warm_up(served)
                start_test(served.predict, served.count, ts, work, audit_config=work / "audit.config")
            out = tmp / "compliance"
            shutil.rmtree(out, ignore_errors=True)
            if script is not None:
                work = tmp / "verification" / f"try_{len(tries) + 1}"
                verdicts = verify_official(script, test, benchmark, work, results, tmp / "runs", out)
            else:
                verdicts = verify_ours(rnd, test, benchmark, results, tmp / "runs", out)
            tries.append(verdicts)
            print(f"{rnd.model(benchmark)} {scenario} {test}, try {len(tries)}: {json.dumps(verdicts)}", flush=True)
            if verdicts["performance"] or len(tries) == TRIES:
                break
        record: dict[str, Any] = {
            "benchmark": benchmark, "model": rnd.model(benchmark), "scenario": scenario, "test": test,
            "round": rnd.name, "runs": list(audits.runs[test]), "checkpoint": checkpoint,
            "shortened": bool(p["shortened"]), "files": f"official: {checkout}" if checkout else "ours (mlrepro)",
            "tries": tries, "verdicts": tries[-1]}
        if test == "TEST01" and not tries[-1]["accuracy"]:
            record["accuracy_fallback"] = accuracy_fallback(
                served, rnd, benchmark, responses(job.input["accuracy"] / "mlperf_log_accuracy.json"),
                responses(tmp / "runs" / "TEST01" / "mlperf_log_accuracy.json"), out / "TEST01" / "accuracy")
        record["passed"] = bool(tries[-1]["performance"]) and (
            tries[-1].get("accuracy", True) or record["accuracy_fallback"]["passed"])
        atomic.write_json(tmp / RESULT, record)
        if not record["passed"] and not p["shortened"]:
            raise AuditTestError(f"{rnd.model(benchmark)} {scenario}: {test} fails ({json.dumps(record['verdicts'])}"
                                 + (f", accuracy fallback {json.dumps(record['accuracy_fallback'])}"
                                    if "accuracy_fallback" in record else "")
                                 + f" after {len(tries)} tries); its logs are in the job's log")
