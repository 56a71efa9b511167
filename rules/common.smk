# What every stage shares: the spec files, the wildcards, the hooks. Paths and specs come from PLAN
# (mlrepro/planning/plan.py), which the Snakefile builds once; nothing here is shared by include order.
import sys

from mlrepro.core import smk


wildcard_constraints:
    benchmark="|".join(PLAN.benchmarks) or "none",
    system=PLAN.system_pattern,
    run=r"\d+",
    spec=PLAN.spec_pattern,


# Each stage's spec (the JSON its job acts on) as a declared input file: the text is in params, so that a
# changed spec (params) re-runs this job, whose new file re-runs what reads it; an unchanged one is not rewritten.
# The package's and the report's describe each system's implementations: they read the config files' capture records
# (ancient inputs, as the runs take them: rules/runs.smk), so that their text is a function of the input and what is
# tracked is its basis (mlrepro.planning.plan.Plan.basis).
rule spec:
    input:
        lambda w: [ancient(str(f)) for f in PLAN.spec_inputs(w.spec)],
    output:
        PLAN.out.spec("{spec}"),
    params:
        text=lambda w, input: PLAN.spec(w.spec),
        basis=lambda w: PLAN.basis(lambda plan: plan.spec(w.spec)),
    log:
        PLAN.out.log("spec_{spec}"),
    script:
        "scripts/write_text.py"


# `snakemake repair`: what planning refused for a damaged output folder, made right. Its message (also with -n)
# names each change; nothing else changes (mlrepro/planning/prepare.py).
rule repair:
    params:
        changes=lambda w: "; ".join(r.what for r in PREPARE.repairs()) or "nothing to repair",
    message:
        "repair: {params.changes}"
    log:
        PLAN.out.log("repair"),
    run:
        planning.prepare.repair(PREPARE, log[0])


onstart:
    # a real run, before its first job: the lock, the receipts (never for -n, --summary, --dag, --lint)
    PREPARE.before_jobs()
    # profiles/slurm: one line on what would stop the cluster's jobs, before the first is submitted (the shapes of the
    # config files captured so far: a first run captures them in its first jobs)
    if smk.executor() == smk.SLURM_EXECUTOR:
        from mlrepro.slurm.checks import PreflightError, preflight

        try:
            preflight(PLAN.config, PLAN.run_shapes)
        except PreflightError as error:
            sys.exit(f"error: {error}")


onerror:
    # On Slurm, say what Slurm recorded for each run that did not finish (CANCELLED, TIMEOUT, NODE_FAIL...).
    if smk.executor() == smk.SLURM_EXECUTOR:
        from mlrepro.slurm.jobs import describe, run_states

        unfinished = [r for r in run_states(PLAN.out.root) if not r["finished"]]
        if unfinished:
            print(f"Runs that did not finish, with Slurm's state (sacct):\n{describe(unfinished)}", file=sys.stderr)
