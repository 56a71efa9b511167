# Stage 7: one self-contained HTML report.
rule report:
    input:
        # paths, not rules.X.output (rules/package.smk says why)
        scores=PLAN.out.scores,
        package=PLAN.out.package_verdict,
        environment=PLAN.out.environment,
        runs=PLAN.all_runs(PLAN.out.summary),
        results=PLAN.all_runs(PLAN.out.result),
        verdicts=PLAN.all_runs(PLAN.out.verdict),
        # the default DAG with a container engine locks the image ids it ran
        lock=[] if PLAN.native or PLAN.config["images"] == "locked" else [PLAN.images_lock],
        manifests=[PLAN.generated_manifest(b) for b in PLAN.mini_benchmarks],
    output:
        PLAN.out.report,
    params:
        spec=lambda w: PLAN.report_spec,
        outdir=PLAN.out.root,
    log:
        PLAN.out.log("report"),
    script:
        "dispatch.py"
