"""What the inference rules fix per benchmark and scenario, and the user.conf that sets LoadGen up.

LoadGen's built-in mlperf.conf (compiled into the wheel) holds the official minimums; the user.conf we
write adds only the QSL's size unless the run is *shortened*: then it also lowers the minimum duration and
query counts, and the result is marked not submittable everywhere it appears. What a submitter states about
the SUT (expected latency and QPS) is not fixed here: each performance run measures it on the machine that
runs it (mlrepro/inference/calibrate.py), unless the user's own user.conf states it.
"""

from __future__ import annotations

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

# Shortened settings: a second instead of ten minutes, and the queries early stopping needs however fast
# the machine is (LoadGen 6.0.17 names them when a run has fewer): SingleStream's p90 estimate needs 64;
# a p99 needs 459 with no query over its bound and 662 with one (MultiStream's conf minimum), which
# Server is given so that one late query does not make a shortened run INVALID.
SHORT_MIN_DURATION_MS = 1000
SHORT_MIN_QUERIES = {"SingleStream": 64, "MultiStream": 662, "Server": 662}


def user_conf(benchmark: str, sample_count: int, shortened: bool) -> str:
    """A user.conf for every scenario of ``benchmark``; ``sample_count`` is the QSL's size."""
    model = MODEL_NAMES[benchmark]
    lines = [
        "# written by mlrepro; LoadGen's built-in mlperf.conf holds the official values",
        f"# shortened: {'yes, NOT SUBMITTABLE' if shortened else 'no'}",
        "# expected latency and QPS: measured before each performance run (its result.json, 'calibration')",
        f"{model}.*.performance_sample_count_override = {sample_count}",
    ]
    if shortened:
        lines += [f"{model}.*.min_duration = {SHORT_MIN_DURATION_MS}",
                  *(f"{model}.{scenario}.min_query_count = {n}" for scenario, n in SHORT_MIN_QUERIES.items()),
                  f"{model}.Offline.min_query_count = {sample_count}"]
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
