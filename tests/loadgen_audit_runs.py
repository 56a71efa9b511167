"""Real LoadGen runs of a stand-in SUT (no model: a sleep per sample, an int32 answer per index) for the audit
tests' verdict comparisons (tests/test_inference_audit_tests.py), all in one process (LoadGen runs several tests
in one; no FromConfig, so none is read twice), each with the official audit.config of its test.

``python tests/loadgen_audit_runs.py CHECKER_DIR OUT`` writes OUT/<scenario>/<name>/ for the scenarios Offline
and SingleStream:
  performance, accuracy: the submission's runs; TEST01, TEST04-A, TEST04-B, TEST05: the audits, same SUT;
  TEST04-B-cache: a SUT that caches answers (a repeated sample costs nothing), with TEST04-B's audit.config;
and for Offline seeded/performance and seeded/TEST05: a SUT fast only on the sample order of the round's own
seeds (it learns it in a first run), the submission run and TEST05 (other seeds).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

SECONDS_PER_SAMPLE = 0.002  # well above a Python SUT's own overhead on a loaded machine (about 1 ms)
SAMPLES = 64
SEEDS = {"qsl_rng_seed": 0, "sample_index_rng_seed": 0, "schedule_rng_seed": 0}  # a TestSettings' own


def main(checker: Path, out: Path) -> None:
    import mlperf_loadgen as lg

    from mlrepro.inference.audit_tests import set_seeds
    from mlrepro.inference.sut import start_test

    audits = checker / "v2.0" / "compliance" / "nvidia"
    configs = {name: audits / name / "audit.config" for name in ("TEST04-A", "TEST04-B", "TEST05")}
    configs.update({"TEST01": audits / "TEST01" / "resnet50" / "audit.config", "TEST04-B-cache": configs["TEST04-B"]})

    def settings(scenario: str, accuracy: bool = False) -> object:
        ts = lg.TestSettings()
        ts.scenario = getattr(lg.TestScenario, scenario)
        ts.mode = lg.TestMode.AccuracyOnly if accuracy else lg.TestMode.PerformanceOnly
        ts.min_duration_ms = 300
        ts.min_query_count = 64 if scenario == "SingleStream" else 1
        ts.offline_expected_qps = 2.0 / SECONDS_PER_SAMPLE  # more than it serves: the query outlasts the minimum
        ts.single_stream_expected_latency_ns = int(SECONDS_PER_SAMPLE * 1e9)
        ts.performance_sample_count_override = SAMPLES
        return ts

    def plain(indices: np.ndarray) -> np.ndarray:
        time.sleep(SECONDS_PER_SAMPLE * len(indices))
        return (indices * 7 % 11).astype(np.int32).reshape(-1, 1)

    cache: set[int] = set()

    def caching(indices: np.ndarray) -> np.ndarray:
        new = [int(i) for i in indices if int(i) not in cache]
        cache.update(new)
        time.sleep(SECONDS_PER_SAMPLE * len(new))
        return (indices * 7 % 11).astype(np.int32).reshape(-1, 1)

    def run(name: str, scenario: str, predict: object, accuracy: bool = False, audit: str | None = None) -> None:
        folder = out / scenario / name
        folder.mkdir(parents=True)
        ts, config = settings(scenario, accuracy), None
        if audit:
            config = folder / "audit.config"
            config.write_bytes(configs[audit].read_bytes())
            set_seeds(ts, config.read_text(), "resnet50", scenario, SEEDS)  # as the pipeline's audit jobs do
        start_test(predict, SAMPLES, ts, folder, audit_config=config)

    for scenario in ("Offline", "SingleStream"):
        run("performance", scenario, plain)
        run("accuracy", scenario, plain, accuracy=True)
        for name in ("TEST01", "TEST04-A", "TEST04-B", "TEST05"):
            run(name, scenario, plain, audit=name)
        cache.clear()
        run("TEST04-B-cache", scenario, caching, audit="TEST04-B-cache")

    order: list[int] = []

    def seeded(indices: np.ndarray) -> np.ndarray:
        """Fast where the samples come in the order it saw first (the round's seeds), slow otherwise."""
        known = len(order) >= len(indices) and order[:len(indices)] == [int(i) for i in indices]
        if not order:
            order.extend(int(i) for i in indices)
        time.sleep(SECONDS_PER_SAMPLE * len(indices) * (1 if known else 3))
        return (indices * 7 % 11).astype(np.int32).reshape(-1, 1)

    learn = out / "seeded" / "learn"
    learn.mkdir(parents=True)
    start_test(seeded, SAMPLES, settings("Offline"), learn, batch=10**9)  # the one query, in one call
    for name, audit in (("performance", None), ("TEST05", "TEST05")):
        folder = out / "seeded" / name
        folder.mkdir(parents=True)
        ts, config = settings("Offline"), None
        if audit:
            config = folder / "audit.config"
            config.write_bytes(configs[audit].read_bytes())
            set_seeds(ts, config.read_text(), "resnet50", "Offline", SEEDS)
        start_test(seeded, SAMPLES, ts, folder, batch=10**9, audit_config=config)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
