# What every stage shares: the wildcards, the hooks. Paths and specs come from PLAN (mlrepro/planning/plan.py),
# which the Snakefile builds once; nothing here is shared by include order.
# Every rule's job runs through rules/dispatch.py: mlrepro/jobs.py gives it its inputs (named files, params), its log
# and its entry function. Snakemake runs it with the interpreter that runs Snakemake (a venv need not be activated);
# a job's params are its arguments, and a changed param re-runs it.
import dataclasses
import sys

from mlrepro.core import smk


wildcard_constraints:
    benchmark=smk.one_of(PLAN.benchmarks),
    system=PLAN.system_pattern,
    run=r"\d+",


# `snakemake repair`: what planning refused for a damaged output folder, made right. Its message (also with -n)
# names each change; nothing else changes (mlrepro/planning/prepare.py).
rule repair:
    params:
        changes=lambda w: "; ".join(r.what for r in PREPARE.repairs()) or "nothing to repair",
        repairs=lambda w: [dataclasses.asdict(r) for r in PREPARE.repairs()],
    message:
        "repair: {params.changes}"
    log:
        PLAN.out.log("repair"),
    localrule: True
    script:
        "dispatch.py"


onstart:
    # a real run, before its first job: the lock, the receipts (never for -n, --summary, --dag, --lint)
    PREPARE.before_jobs()
    # profiles/slurm: one line on what would stop the cluster's jobs, before the first is submitted (the shapes of the
    # config files captured so far: a first run captures them in its first jobs)
    if smk.executor() == smk.SLURM_EXECUTOR:
        from mlrepro.slurm.checks import PreflightError, preflight

        from mlrepro.slurm.node_env import NodeEnvError

        try:
            preflight(PLAN.config, PLAN.run_shapes)
            PLAN.node_environments  # each system's nodes: a venv of their architecture (mlrepro/slurm/node_env.py)
        except (PreflightError, NodeEnvError) as error:
            sys.exit(f"error: {error}")


onerror:
    # On Slurm, say what Slurm recorded for each run that did not finish (CANCELLED, TIMEOUT, NODE_FAIL...).
    if smk.executor() == smk.SLURM_EXECUTOR:
        from mlrepro.slurm.jobs import describe, run_states

        unfinished = [r for r in run_states(PLAN.out.root) if not r["finished"]]
        if unfinished:
            print(f"Runs that did not finish, with Slurm's state (sacct):\n{describe(unfinished)}", file=sys.stderr)
