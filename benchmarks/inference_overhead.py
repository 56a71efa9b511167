"""LoadGen's own overhead per query on this machine: an empty SUT (it answers each query inside the issue
callback, no data) in SingleStream and Offline, each repetition its own process (LoadGen is set up once per
process). Prints the median of --repeat runs.

    python benchmarks/inference_overhead.py [--repeat 3] [--seconds 2]

SingleStream: mean query latency as LoadGen measured it (issue -> completion, the callback round trip)
and wall time per query. Offline: LoadGen's wall time per sample for one query of N samples.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
import mlperf_loadgen as lg
scenario, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]

def issue(samples):
    lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])

ts = lg.TestSettings()
ts.scenario = getattr(lg.TestScenario, scenario)
ts.mode = lg.TestMode.PerformanceOnly
ts.min_duration_ms = int(seconds * 1000)
ts.min_query_count = 1
if scenario == "SingleStream":
    ts.single_stream_expected_latency_ns = 10_000
else:
    ts.offline_expected_qps = 200_000
log = lg.LogSettings()
log.log_output.outdir = out
log.enable_trace = False
sut = lg.ConstructSUT(issue, lambda: None)
qsl = lg.ConstructQSL(1024, 1024, lambda i: None, lambda i: None)
t0 = time.perf_counter()
lg.StartTestWithLogSettings(sut, qsl, ts, log)
wall = time.perf_counter() - t0
detail = {}
for line in open(out + "/mlperf_log_detail.txt"):
    if line.startswith(":::MLLOG"):
        rec = json.loads(line[8:])
        detail[rec["key"]] = rec["value"]
n = int(detail["result_query_count"]) if scenario == "SingleStream" else int(detail["generated_samples_per_query"])
print(json.dumps({"wall_s": wall, "count": n, "mean_latency_ns": detail.get("result_mean_latency_ns")}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0)
    args = p.parse_args()
    for scenario in ("SingleStream", "Offline"):
        per, lat = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as out:
                res = json.loads(subprocess.run([sys.executable, "-c", CHILD, scenario, str(args.seconds), out],
                                                check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            per.append(res["wall_s"] / res["count"] * 1e6)
            if res["mean_latency_ns"]:
                lat.append(res["mean_latency_ns"] / 1e3)
        unit = "query" if scenario == "SingleStream" else "sample"
        line = f"{scenario}: median wall per {unit} {statistics.median(per):.2f} us (runs: "
        line += ", ".join(f"{x:.2f}" for x in per) + ")"
        if scenario == "SingleStream" and lat:
            line += f"; median LoadGen mean latency {statistics.median(lat):.2f} us"
        print(line)


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"({time.perf_counter() - start:.1f} s; {Path(sys.executable).name})")
