# Stage 4 (a hard gate): every result file through the official compliance checker.
rule compliance:
    input:
        result=OUT / "runs" / "{benchmark}" / "{run}" / "result.txt",
        summary=OUT / "runs" / "{benchmark}" / "{run}" / "run.json",
    output:
        OUT / "compliance" / "{benchmark}" / "{run}.json",
    params:
        usage=config["usage"],
        ruleset=config["ruleset"],
    log:
        INFO / "logs" / "compliance_{benchmark}_{run}.log",
    shell:
        "{PY} -m mlrepro.gate.compliance {input.result:q} --run-json {input.summary:q} --usage {params.usage:q} "
        "--ruleset {params.ruleset:q} --out {output:q} 2> {log:q} || (cat {log:q} >&2; exit 1)"
