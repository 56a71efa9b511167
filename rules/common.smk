# Paths and helpers every stage shares.
import json
import sys
from pathlib import Path

from mlrepro.core import rulesets
from mlrepro.core.config import config_hash, run_seed, submittable, system_name
from mlrepro.runs.implementation import describe as describe_implementation
from mlrepro.core import smk as _smk
# The interpreter running snakemake runs every stage too (a venv need not be activated).
PY = _smk.python_command()
OUT = Path(config["outdir"])
INFO = OUT / "pipeline_info"
REPORT = OUT / "report.html"
SYSTEM = system_name(config["system"])
SUBMITTABLE = submittable(BENCHMARKS)
CONFIG_HASH = config_hash(config)


def run_indices(benchmark):
    return range(BENCHMARKS[benchmark].runs)


def all_runs(pattern):
    """``pattern`` formatted for every (benchmark, run) of the config, in seed-document order."""
    return [str(pattern).format(benchmark=b, run=i) for b in ordered_benchmarks() for i in run_indices(b)]


def ordered_benchmarks():
    order = {b: i for i, b in enumerate(rulesets.SEED_ORDER)}
    return sorted(BENCHMARKS, key=lambda b: order.get(b, len(order)))


def engine_options(image_records):
    """The options that point a stage at its engine: for container engines the image's build record,
    which names the image, the engine and its socket (one source: the record the image was built for)."""
    if not image_records:
        return ["--engine", "native"]
    options = ["--image-record", str(image_records[0])]
    if config["images"] == "locked":
        options.append("--locked")
    return options  # an argument list: the rules quote each element ({params.engine:q})


def submission_json():
    return json.dumps({"org": config["org"], "platform": SYSTEM, "division": config["division"],
                       "status": config["status"]})


wildcard_constraints:
    benchmark="|".join(BENCHMARKS) or "none",
    run=r"\d+",


onstart:
    # profiles/slurm: one line on what would stop the cluster's jobs, before the first is submitted
    if workflow.executor_plugin is not None and workflow.executor_plugin.name.endswith("slurm"):
        from mlrepro.slurm.checks import PreflightError, preflight

        try:
            preflight(config, BENCHMARKS)
        except PreflightError as error:
            sys.exit(f"error: {error}")


onerror:
    # On Slurm, say what Slurm recorded for each run that did not finish (CANCELLED, TIMEOUT, NODE_FAIL...).
    if workflow.executor_plugin is not None and workflow.executor_plugin.name.endswith("slurm"):
        from mlrepro.slurm.jobs import describe, run_states

        unfinished = [r for r in run_states(OUT) if not r["finished"]]
        if unfinished:
            print("Runs that did not finish, with Slurm's state (sacct):\n" + describe(unfinished), file=sys.stderr)
