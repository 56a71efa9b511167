# Stage 7: one self-contained HTML report.
rule report:
    input:
        scores=OUT / "scores.json",
        package=OUT / "package_check.json",
        environment=INFO / "environment.json",
        runs=all_runs(OUT / "runs" / "{benchmark}" / "{run}" / "run.json"),
        results=all_runs(OUT / "runs" / "{benchmark}" / "{run}" / "result.txt"),
        verdicts=all_runs(OUT / "compliance" / "{benchmark}" / "{run}.json"),
        # the default DAG with a container engine locks the image ids it ran
        lock=[] if config["engine"] == "native" or config["images"] == "locked" else [IMAGES_LOCK],
        manifests=expand(OUT / "data" / "{benchmark}" / _data.MANIFEST,
                         benchmark=[b for b in ordered_benchmarks() if BENCHMARKS[b].mini]),
    output:
        REPORT,
    params:
        config=json.dumps(config, sort_keys=True, default=str),
        config_hash=CONFIG_HASH,
        system=SYSTEM,
        submittable_flag=[] if SUBMITTABLE else ["--not-submittable"],
        benchmarks=json.dumps({b: {"params": BENCHMARKS[b].params, "runs": BENCHMARKS[b].runs,
                                   "required_runs": BENCHMARKS[b].required_runs,
                                   "implementation": describe_implementation(BENCHMARKS[b].implementation)}
                               for b in ordered_benchmarks()}),
    log:
        INFO / "logs" / "report.log",
    shell:
        "{PY} -m mlrepro.report.submission --outdir {OUT:q} --system {params.system:q} "
        "--config {params.config:q} --config-hash {params.config_hash:q} "
        "--benchmarks {params.benchmarks:q} {params.submittable_flag:q} --out {output:q} 2> {log:q}"
