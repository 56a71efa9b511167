"""The inference_audit_test job's own code (mlrepro/inference/audit_tests.py ``audit``, its tries included) on real
LoadGen runs of a stand-in SUT (no model: a sleep per sample, an int32 answer per index), for
tests/test_inference_audit_retries.py: a broken SUT must fail its audit however many tries NVIDIA's flow allows.

``python tests/loadgen_audit_job.py OUT ROUND TEST SUT SHORTENED`` makes the submission's Offline runs
(OUT/runs/performance, OUT/runs/accuracy) with an honest SUT, then the job's audit ``TEST`` of ROUND into
OUT/audit with SUT: ``honest``; ``cache`` (a repeated sample costs nothing: the result caching TEST04 finds);
``changed`` (every answer differs from the accuracy run's: what TEST01 finds). SHORTENED 0: a failed test fails
the job (exit status 3, its message on stderr), as for a submittable run. LoadGen runs several tests in one
process, and no FromConfig is called (the settings are set by hand); a later try of the test runs in a process of its
own, as the job's do (``... --runs-into DEST``: that try's LoadGen runs only, with a fresh SUT).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SECONDS_PER_SAMPLE = 0.002  # well above a Python SUT's own overhead on a loaded machine (about 1 ms)
SAMPLES = 64


def answers(indices: np.ndarray) -> np.ndarray:
    return (indices * 7 % 11).astype(np.int32).reshape(-1, 1)


class Served:
    """What the job needs of a served model: predict, count and the accuracy of logged responses."""

    count = SAMPLES

    def __init__(self, kind: str) -> None:
        self.kind, self.cache = kind, set[int]()

    def predict(self, indices: np.ndarray) -> np.ndarray:
        new = [int(i) for i in indices if int(i) not in self.cache] if self.kind == "cache" else list(indices)
        if self.kind == "cache":
            self.cache.update(new)
        time.sleep(SECONDS_PER_SAMPLE * len(new))
        return answers(indices) + (1 if self.kind == "changed" else 0)

    def accuracy(self, responses: dict[int, bytes]) -> float:
        right = [np.frombuffer(data, np.int32)[0] == answers(np.array([i]))[0, 0] for i, data in responses.items()]
        return float(np.mean(right)) if right else 0.0

    def accuracy_line(self, value: float) -> str:
        return f"Accuracy = {value * 100:.3f}"


def main(out: Path, round_name: str, test: str, kind: str, shortened: bool, runs_into: Path | None) -> None:
    import mlperf_loadgen as lg

    from mlrepro.core.job import Files, Job
    from mlrepro.inference import audit_tests, rounds, run
    from mlrepro.inference.sut import start_test

    rnd = rounds.get(round_name)

    def settings(*_: Any, accuracy: bool = False) -> Any:
        ts = lg.TestSettings()
        ts.scenario = lg.TestScenario.Offline
        ts.mode = lg.TestMode.AccuracyOnly if accuracy else lg.TestMode.PerformanceOnly
        ts.min_duration_ms = 300
        ts.min_query_count = 1
        ts.offline_expected_qps = 2.0 / SECONDS_PER_SAMPLE  # more than it serves: the query outlasts the minimum
        ts.performance_sample_count_override = SAMPLES
        for key, seed in rnd.seeds().items():
            setattr(ts, key, seed)
        return ts

    runs = out / "runs"
    named = {"conf": str(out / "user.conf"), "performance": str(runs / "performance"),
             "accuracy": str(runs / "accuracy")}
    job = Job("inference_audit_test", Files(tuple(named.values()), named),
              Files((str(out / "audit"),), {"out": str(out / "audit")}),
              {"round": round_name, "shortened": shortened, "mlcommons": ""},
              {"ibench": "resnet", "scenario": "Offline", "test": test})
    if runs_into is not None:
        audit_tests.run_test(job, Served(kind), settings, runs_into)
        return
    honest = Served("honest")
    for mode in ("performance", "accuracy"):
        (runs / mode).mkdir(parents=True)
        start_test(honest.predict, SAMPLES, settings(accuracy=mode == "accuracy"), runs / mode)
    (runs / "performance" / "result.json").write_text("{}")  # no calibration stated: the settings are as set
    (out / "user.conf").write_text("")

    def fresh(dest: Path) -> None:
        subprocess.run([sys.executable, "-P", __file__, *sys.argv[1:6], "--runs-into", str(dest)], check=True,
                       timeout=300)

    try:
        audit_tests.audit(job, Served(kind), {"run": "stand-in"}, settings, run.accuracy_responses, fresh)
    except audit_tests.AuditTestError as e:
        sys.stderr.write(f"{e}\n")
        sys.exit(3)
    print(json.dumps(json.loads((out / "audit" / "result.json").read_text())["verdicts"]))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1",
         Path(sys.argv[7]) if sys.argv[6:7] == ["--runs-into"] else None)
