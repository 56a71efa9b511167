"""LoadGen's Server schedule on its own: ``python tests/loadgen_server_schedule.py OUT QPS`` runs an instant SUT
(no timing of its own) at the shortened Server settings of mlrepro/inference/settings.py, with v2.0's seeds and
TEST05's, and prints the scheduled samples per second of each as JSON (the value v2.0's verification compares)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(out: Path, qps: float) -> None:
    import mlperf_loadgen as lg

    from mlrepro.inference import rounds, settings, summary
    from mlrepro.inference.sut import start_test

    rnd = rounds.get("v2.0")
    test05 = {k: int(v) for k, v in (line.split(" = ") for line in rnd.audits.audit_config("TEST05", "resnet50")
                                     .splitlines() if "seed" in line)} if rnd.audits else {}
    rates = {}
    for name, seeds in (("round", rnd.seeds()), ("TEST05", {k.split(".")[-1]: v for k, v in test05.items()})):
        ts = lg.TestSettings()
        ts.scenario, ts.mode = lg.TestScenario.Server, lg.TestMode.PerformanceOnly
        ts.server_target_qps, ts.server_target_latency_ns = qps, 10**9
        ts.min_duration_ms = settings.SHORT_MIN_DURATION_MS_SERVER
        ts.min_query_count = settings.SHORT_MIN_QUERIES["Server"]
        ts.performance_sample_count_override = 256
        for key, seed in seeds.items():
            setattr(ts, key, seed)
        (out / name).mkdir(parents=True)
        start_test(lambda idx: np.zeros((len(idx), 1), np.int32), 256, ts, out / name)
        d = summary.detail(out / name / "mlperf_log_detail.txt")
        rates[name] = {"scheduled": float(d["result_scheduled_samples_per_sec"]),
                       "queries": int(d["generated_query_count"])}
    print(json.dumps(rates))


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]))
