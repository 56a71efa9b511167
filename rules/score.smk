# Stage 6: the olympic mean per benchmark, as MLPerf scores it.
rule score:
    input:
        results=all_runs(OUT / "runs" / "{benchmark}" / "{run}" / "result.txt"),
        verdicts=all_runs(OUT / "compliance" / "{benchmark}" / "{run}.json"),
        summaries=all_runs(OUT / "runs" / "{benchmark}" / "{run}" / "run.json"),
    output:
        OUT / "scores.json",
    params:
        results=all_runs("{benchmark}=" + str(OUT / "runs" / "{benchmark}" / "{run}" / "result.txt")),
        ruleset=config["ruleset"],
        division=config["division"],
    log:
        INFO / "logs" / "score.log",
    shell:
        "{PY} -m mlrepro.score --verify-hashes --results {params.results:q} --out {output:q} "
        "--ruleset {params.ruleset:q} --division {params.division:q} 2> {log:q}"
