# Stage 5: the MLCommons submission tree, judged by the official package checker.
from mlrepro.core import rulesets

rule package:
    input:
        spec=PLAN.out.spec("package"),
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
    output:
        tree=directory(PLAN.out.submission),
        verdict=PLAN.out.package_verdict,
    params:
        # the release whose package checker judges (logging_release; else the installed mlperf_logging)
        release=rulesets.release_args(PLAN.config),
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    log:
        PLAN.out.log("package_checker"),
    shell:
        "{params.python:q} -m mlrepro.package.assemble --spec {input.spec:q} --environment {input.environment:q} "
        "--out {output.tree:q} --verdict {output.verdict:q} --log {log:q} {params.release:q}"
