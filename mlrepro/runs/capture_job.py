"""The pipeline's capture job (rules/runs.smk ``capture``, through mlrepro/jobs.py).

Sources one config file natively (mlrepro/runs/capture.py), or a reproduced package's staged copy in its image
(the inputs rules/reproduce.smk gives the rule: mlrepro/reproduce/run_stage.py), checks every (system, benchmark)
that reads it against its variables (mlrepro.runs.implementation.unit_problems: the messages planning gives once the
record exists), runs each of their run.sub files as a run would run it to find what it needs set that neither the
config file nor the config sets (mlrepro/runs/demands.py: a job's work, never planning's) and, on a Slurm cluster,
checks their job shapes against the partition (mlrepro.slurm.checks, the preflight the onstart hook runs for the
shapes it knows), and writes the record, atomically, only where nothing stops them: a failed check fails the job,
naming each variable with the file and line that reads it and the mount it feeds, and the next plan runs it again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlrepro.core.job import Job
from mlrepro.runs import demands, runsub
from mlrepro.runs.capture import CaptureError, Record, source_in_image, source_native, write
from mlrepro.runs.implementation import captured, unit_problems
from mlrepro.slurm import trace
from mlrepro.slurm.checks import PreflightError, check
from mlrepro.slurm.resources import JobShape, unit_shape


def capture(config: Path, out: Path, checks: list[dict[str, Any]], preflight: dict[str, Any] | None = None,
            runs: list[dict[str, Any]] | None = None, image: Path | None = None, code: Path | None = None) -> Record:
    """Source ``config`` (in the image of the build record ``image``, with only the folder ``code`` that holds it
    mounted; none: natively), check each unit of ``checks`` against its variables, run each run.sub of ``runs``
    (Plan's capture_runs) with them to find what it needs set (and, ``preflight``: Plan's capture_preflight, check
    their shapes against the Slurm partition), write the record to ``out``; CaptureError with what to do where it
    cannot be sourced or a check fails (then nothing is written)."""
    record = source_native(config) if image is None or code is None else source_in_image(image, config, code)
    problems = [line for unit in checks for line in unit_problems(record.env, **unit)]
    if not problems:
        problems = [line for run in runs or [] for line in run_problems(record, run)]
    if problems:
        raise CaptureError("invalid configuration (config/config.yaml and --config):\n" + "\n".join(problems))
    if preflight:
        shapes = {}
        for unit in checks:
            name = f"{unit['system']}/{unit['benchmark']}"
            given = preflight["units"][name]
            configured = JobShape(**{**given["configured"], "sbatch": tuple(given["configured"]["sbatch"])}) \
                if given["configured"] else None
            sbatch = tuple(given["sbatch"]) if given["sbatch"] is not None else None
            # run.sub runs with the config's env over the config file's (runsub.environment): so is its shape
            base = {**record.env, **unit["given"]} if sbatch is not None else record.env
            env = captured(base, Path(unit["config_file"]), Path(unit["folder"]), unit["kind"]).env
            shapes[name] = unit_shape(env, configured, given["nodes"], sbatch)
        try:
            check(shapes, preflight["partition"], preflight["threads"], engine=preflight["engine"])
        except PreflightError as e:
            raise CaptureError(str(e)) from None
    write(record, out)
    return record


def run_problems(record: Record, run: dict[str, Any]) -> list[str]:
    """What the unit's run.sub needs set that the config file (``record``) and the config leave unset or empty, each a
    line naming the config key, the file and line that reads it and the mount it feeds."""
    config, run_sub = Path(run["config_file"]), Path(run["run_sub"])
    shape = captured(record.env, config, run_sub.parent, "folder")
    given = {"DGXSYSTEM": runsub.dgx_system(config, record.env), **run["given"]}
    cont = run["cont"] or runsub.unbuilt_image(run_sub.parent)  # None: built from the folder's Dockerfile
    env = runsub.run_env(record.env, given, cont, run["data_dir"], run["log_dir"], run["seed"],
                         run["submission"])
    node = trace.Node.of(shape.nodes, shape.gpus_per_node, given["DGXSYSTEM"], **run["node"])
    found = demands.find(run_sub, env, node)
    return demands.problems(found.demands, benchmark=run["benchmark"], system=run["system"], config_name=config.name,
                            fills=run["fills"])


def job(job: Job) -> None:
    """The capture rule's job: params config (the file to source), checks (the units that read it), runs (their
    run.sub files, as runs give them their variables), preflight (on a Slurm cluster: the partition, threads, engine
    and each unit's shape; else none); inputs image and stage, where given (a reproduction with a container engine:
    the image's build record, the staged copy); output: the record."""
    p, out, stage = job.params, job.output.first, job.input.get("stage")
    record = capture(Path(p["config"]), out, p["checks"], p["preflight"], p["runs"],  # CaptureError: its one line
                     job.input.get("image"), stage.resolve() if stage else None)
    print(f"{out}: {len(record.env)} variables of {p['config']}" + (
        f", which sourced {', '.join(record.sourced)}" if record.sourced else ""))
