# Stage 5: the MLCommons submission tree, judged by the official package checker.
rule package:
    input:
        results=all_runs(OUT / "runs" / "{benchmark}" / "{run}" / "result.txt"),
        verdicts=all_runs(OUT / "compliance" / "{benchmark}" / "{run}.json"),
        environment=INFO / "environment.json",
        # each result is verified against its run's result_sha256; the provenance manifest records each
        # run's summary and each dataset's manifest
        summaries=all_runs(OUT / "runs" / "{benchmark}" / "{run}" / "run.json"),
        data_manifests=[dataset_ready(b) for b in ordered_benchmarks() if BENCHMARKS[b].mini],
        images=lambda w: [] if config["engine"] == "native" else
        [OUT / "containers" / f"{image}.json" for image in sorted({b.image for b in BENCHMARKS.values()})],
    output:
        tree=directory(OUT / "submission"),
        verdict=OUT / "package_check.json",
    params:
        spec=lambda w, input: json.dumps({
            "org": config["org"], "system": SYSTEM, "usage": config["usage"], "ruleset": config["ruleset"],
            "submittable": SUBMITTABLE,
            "system_desc": json.loads(Path(input.environment).read_text())["system_desc"],
            "runs": {b: [str(OUT / "runs" / b / str(i) / "result.txt") for i in run_indices(b)]
                     for b in ordered_benchmarks()},
            "implementations": {b: {
                "kind": BENCHMARKS[b].implementation.kind, "name": BENCHMARKS[b].implementation.name,
                "folder": str(BENCHMARKS[b].implementation.folder), "image": BENCHMARKS[b].image,
                "config_file": BENCHMARKS[b].implementation.config_file.name,
                "image_record": None if config["engine"] == "native" else
                str(OUT / "containers" / f"{BENCHMARKS[b].image}.json")} for b in BENCHMARKS},
            "provenance": {"outdir": str(OUT), "config": config, "config_hash": CONFIG_HASH,
                           "data_manifests": {b: str(Path(dataset_dir(b)) / _data.MANIFEST) for b in BENCHMARKS
                                              if BENCHMARKS[b].mini}},
        }, default=str),
        spec_file=INFO / "package_spec.json",
    log:
        INFO / "logs" / "package_checker.log",
    shell:
        "printf '%s' {params.spec:q} > {params.spec_file:q} && "
        "{PY} -m mlrepro.package.assemble --spec {params.spec_file:q} --out {output.tree:q} "
        "--verdict {output.verdict:q} --log {log:q}"
