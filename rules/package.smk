# Stage 5: the MLCommons submission tree, judged by the official package checker.
rule package:
    input:
        results=all_runs(OUT / "runs" / "{benchmark}" / "{run}" / "result.txt"),
        verdicts=all_runs(OUT / "compliance" / "{benchmark}" / "{run}.json"),
        summaries=all_runs(OUT / "runs" / "{benchmark}" / "{run}" / "run.json"),
        environment=INFO / "environment.json",
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
            "images": {b: BENCHMARKS[b].image for b in BENCHMARKS},
        }),
        spec_file=INFO / "package_spec.json",
    log:
        INFO / "logs" / "package_checker.log",
    shell:
        "printf '%s' {params.spec:q} > {params.spec_file:q} && "
        "{PY} -m mlrepro.package --spec {params.spec_file:q} --out {output.tree:q} "
        "--verdict {output.verdict:q} --log {log:q}"
