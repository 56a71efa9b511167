"""What the inference rules fix per benchmark and scenario, and the user.conf that sets LoadGen up.

LoadGen's built-in mlperf.conf (compiled into the wheel) holds the official minimums; the user.conf we
write adds only what a submitter may set (expected QPS and latencies, the QSL's size) unless the run is
*shortened*: then it also lowers the minimum duration and query counts, and the result is marked not
submittable everywhere it appears.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlrepro.inference.summary import SCENARIOS

# Our benchmark -> LoadGen's model name in mlperf.conf (mlcommons-loadgen 6.0.17 / inference HEAD).
MODEL_NAMES = {"resnet": "resnet50", "ssd": "retinanet", "bert": "bert", "dlrm": "dlrm-v2", "rnnt": "rnnt",
               "unet3d": "3d-unet"}
# Official minimums of the built-in mlperf.conf that our checks hold a submittable run to.
OFFICIAL_MIN_DURATION_MS = 600_000
# (SingleStream and Server: what 6.0.17's built-in conf logs; Offline counts samples.)
OFFICIAL_MIN_QUERIES = {"SingleStream": 100, "MultiStream": 662, "Server": 100, "Offline": 24_576}
MODES = ("performance", "accuracy")
QUALITY_FRACTION = 0.99  # the closed target: 99% of the reference model's accuracy

# Shortened settings: seconds instead of ten minutes, still enough queries for early stopping.
SHORT_MIN_DURATION_MS = 1000


@dataclass(frozen=True)
class Hints:
    """What a submitter states about the SUT (allowed in user.conf): expected latency and throughput."""

    single_stream_latency_ms: float = 2.0
    multi_stream_latency_ms: float = 8.0
    server_qps: float = 100.0
    offline_qps: float = 6000.0


# What the mini models do on one CPU thread, about (Offline over-asks: finishing early is INVALID; dlrm
# served ~90k samples/s on an idle core here).
# resnet: 40 queries/s keeps Server's p99 under its 15 ms bound on 2 busy cores (at 100 it missed it);
# Offline served ~9k samples/s on an idle core.
HINTS = {"resnet": Hints(server_qps=40.0, offline_qps=20000.0),
         "dlrm": Hints(single_stream_latency_ms=1.0, multi_stream_latency_ms=2.0, offline_qps=200000.0)}


def user_conf(benchmark: str, sample_count: int, shortened: bool, hints: Hints | None = None) -> str:
    """A user.conf for every scenario of ``benchmark``; ``sample_count`` is the QSL's size."""
    model = MODEL_NAMES[benchmark]
    hints = hints or HINTS.get(benchmark, Hints())
    lines = [
        "# written by mlrepro; LoadGen's built-in mlperf.conf holds the official values",
        f"# shortened: {'yes, NOT SUBMITTABLE' if shortened else 'no'}",
        f"{model}.*.performance_sample_count_override = {sample_count}",
        f"{model}.SingleStream.target_latency = {hints.single_stream_latency_ms:g}",
        f"{model}.MultiStream.target_latency = {hints.multi_stream_latency_ms:g}",
        f"{model}.Server.target_qps = {hints.server_qps:g}",
        f"{model}.Offline.target_qps = {hints.offline_qps:g}",
    ]
    if shortened:
        lines += [
            f"{model}.*.min_duration = {SHORT_MIN_DURATION_MS}",
            f"{model}.Offline.min_query_count = {sample_count}",
            f"{model}.Server.min_query_count = 500",  # early stopping needs ~460 at p99
        ]
    return "\n".join(lines) + "\n"


_CONF_HEAD = b"# The format of this config file is 'key = value'."


def builtin_mlperf_conf() -> str:
    """The mlperf.conf compiled into the installed LoadGen (its mlperf_conf.h is one string constant in
    the extension), for the package: the wheel ships no separate copy."""
    import mlperf_loadgen

    data = Path(mlperf_loadgen.__file__).read_bytes()
    start = data.find(_CONF_HEAD)
    if start < 0:
        raise RuntimeError(f"{mlperf_loadgen.__file__}: no built-in mlperf.conf found in this LoadGen build")
    return data[start : data.find(b"\0", start)].decode("utf-8")


def check_scenarios(scenarios: list[str]) -> None:
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}; LoadGen has {', '.join(SCENARIOS)}")


def main(argv: list[str] | None = None) -> None:
    import argparse
    import shutil

    from mlrepro.core import atomic
    p = argparse.ArgumentParser(prog="python -m mlrepro.inference.settings", description="write a user.conf")
    p.add_argument("--benchmark", required=True, choices=sorted(MODEL_NAMES))
    p.add_argument("--samples", type=int, required=True, help="the QSL's size (the held-out set)")
    p.add_argument("--shortened", action="store_true")
    p.add_argument("--from", dest="source", type=Path, default=None, help="copy this user.conf instead")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.source is not None:
        with atomic.atomic_path(args.out) as tmp:
            shutil.copyfile(args.source, tmp)
    else:
        atomic.write_text(args.out, user_conf(args.benchmark, args.samples, args.shortened))


if __name__ == "__main__":
    main()
