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
        # the config files' capture records the spec is read from (ancient: a record made again under its name,
        # what it captured unchanged, keeps what was made)
        captures=[ancient(str(f)) for f in PLAN.capture_files],
        # inference.vendor's runs: throughput per accelerator beside energy (rules/inference_vendor.smk)
        vendor=VENDOR_REPORT,
    output:
        PLAN.out.report,
    params:
        # read from the capture records: a function of the input, which Snakemake does not track (<TBD> until
        # they exist); tracked: the spec as it would be for stand-in records (PLAN.rerun.basis)
        spec=lambda w, input: PLAN.report_spec(),
        basis=lambda w: PLAN.rerun.basis(lambda plan: plan.report_spec()),
        outdir=PLAN.out.root,
    log:
        PLAN.out.log("report"),
    script:
        "dispatch.py"
