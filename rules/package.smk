# Stage 5: the MLCommons submission tree, judged by the official package checker (of the release that judges the
# ruleset: logging_release; else the installed mlperf_logging); its output is the job's log.
rule package:
    input:
        results=PLAN.all_runs(PLAN.out.result),
        verdicts=PLAN.all_runs(PLAN.out.verdict),
        # the probed host of every system description (systems/<system>.json); paths, not rules.X.output:
        # Snakemake 9 matches each input against a rule reference by hashing this rule's whole input lists
        # (quadratic in the runs: seconds at a thousand runs)
        environment=PLAN.out.environment,
        # each result is verified against its run's result_sha256; the provenance manifest records each
        # run's summary and each dataset's manifest
        summaries=PLAN.all_runs(PLAN.out.summary),
        data_manifests=[PLAN.dataset_ready(b) for b in PLAN.mini_benchmarks],
        images=PLAN.image_records,
        # the config files' capture records the spec is read from (ancient: a record made again under its name,
        # what it captured unchanged, keeps what was made)
        captures=[ancient(str(f)) for f in PLAN.capture_files],
        release=[ancient(s) for s in PLAN.release_stamps],  # the judging release's install (rules/release.smk)
    output:
        tree=directory(PLAN.out.submission),
        verdict=PLAN.out.package_verdict,
    params:
        # read from the capture records: a function of the input, which Snakemake does not track (<TBD> until
        # they exist); tracked: the spec as it would be for stand-in records (PLAN.rerun.basis)
        spec=lambda w, input: PLAN.package_spec(),
        basis=lambda w: PLAN.rerun.basis(lambda plan: plan.package_spec()),
        release=PLAN.logging_release,
    log:
        PLAN.out.log("package_checker"),
    script:
        "dispatch.py"
