"""What the inference rules fix per benchmark and scenario, and the user.conf that sets LoadGen up.

The user.conf we write states the declared round's official values for the model (mlrepro/inference/rounds.py:
v2.0's from that round's mlperf.conf, v6.1's from LoadGen's built-in one), so that LoadGen runs by the round's
rules whichever conf it compiles in. A *shortened* run lowers the minimum duration, query counts and, where
the QSL is smaller, the performance sample count, and is marked not submittable everywhere it appears. What
a submitter states about the SUT (expected latency and QPS) is not fixed here: each performance run measures
it on the machine that runs it (mlrepro/inference/calibrate.py), unless the user's own user.conf states it.
"""

from __future__ import annotations

from mlrepro.core.errors import MlreproError
from mlrepro.core.job import Job
from mlrepro.inference import rounds
from mlrepro.inference.summary import SCENARIOS

MODES = ("performance", "accuracy")

# Shortened settings: a second instead of ten minutes, and the queries early stopping needs however fast
# the machine is (LoadGen 6.0.17 names them when a run has fewer): SingleStream's p90 estimate needs 64;
# a p99 needs 459 with no query over its bound and 662 with one (MultiStream's conf minimum), which
# Server is given so that one late query does not make a shortened run INVALID.
SHORT_MIN_DURATION_MS = 1000
SHORT_MIN_QUERIES = {"SingleStream": 64, "MultiStream": 662, "Server": 662}


class SettingsError(MlreproError, ValueError):
    pass


def user_conf(benchmark: str, sample_count: int, shortened: bool, round_name: str = rounds.DEFAULT) -> str:
    """A user.conf for every scenario of ``benchmark`` under ``round_name``; ``sample_count`` is the QSL's size."""
    rnd = rounds.get(round_name)
    model = rnd.loadgen_model(benchmark)
    # 0 in the round's conf (3d-unet): the whole dataset, as the round's checker counts it
    official = (rnd.int_value(benchmark, "*", "performance_sample_count_override")
                or rnd.dataset_size.get(rnd.model(benchmark), sample_count))
    if official > sample_count and not shortened:
        raise SettingsError(
            f"{benchmark}: the held-out set has {sample_count} samples, fewer than the {official} performance "
            f"samples {model} needs at {round_name}; raise benchmarks.{benchmark}.data.eval_samples to {official} "
            "or more, or set inference.shortened: true (not submittable)")
    lines = [
        f"# written by mlrepro for MLPerf Inference {round_name}: the round's official values for {model}"
        + (" (from its mlperf.conf; LoadGen 6.0.17 compiles in v6.1's)" if rnd.conf_text is not None else ""),
        f"# shortened: {'yes, NOT SUBMITTABLE: lower minimums and performance sample count' if shortened else 'no'}",
        "# expected latency and QPS: measured before each performance run (its result.json, 'calibration')",
    ]
    for scenario in SCENARIOS:
        # one exact model.scenario line per key: LoadGen prefers it to any wildcard line
        values = {key: value for key in rounds.BINDING_KEYS
                  if (value := rnd.value(benchmark, scenario, key)) is not None}
        if scenario == "Server" and (bound := rnd.value(benchmark, scenario, "target_latency")) is not None:
            values["target_latency"] = bound  # the round's latency bound, not a statement about the SUT
        if shortened:
            values.update(performance_sample_count_override=str(min(official, sample_count)),
                          min_duration=str(SHORT_MIN_DURATION_MS),
                          min_query_count=str(SHORT_MIN_QUERIES.get(scenario, sample_count)))
        lines += [f"{model}.{scenario}.{key} = {value}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def job(job: Job) -> None:
    """rules/inference.smk inference_conf: wildcard ibench; params samples (the QSL's size: the held-out set),
    shortened, round; input: the user's own user.conf, copied instead, where the config names one."""
    import shutil

    from mlrepro.core import atomic

    out = job.output.first
    if len(job.input):
        with atomic.atomic_path(out) as tmp:
            shutil.copyfile(job.input.first, tmp)
        return
    try:
        text = user_conf(job.wildcards["ibench"], int(job.params["samples"]), bool(job.params["shortened"]),
                         job.params["round"])
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    atomic.write_text(out, text)
