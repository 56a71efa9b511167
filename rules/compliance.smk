# Stage 4 (a hard gate): every result file through the official compliance checker.
rule compliance:
    input:
        OUT / "runs" / "{benchmark}" / "{run}" / "result.txt",
    output:
        OUT / "compliance" / "{benchmark}" / "{run}.json",
    params:
        usage=config["usage"],
        ruleset=config["ruleset"],
    log:
        INFO / "logs" / "compliance_{benchmark}_{run}.log",
    shell:
        "{PY} -m mlrepro.compliance {input:q} --usage {params.usage} --ruleset {params.ruleset} "
        "--out {output:q} 2> {log} || (cat {log} >&2; exit 1)"
