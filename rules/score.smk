# Stage 6: the olympic mean per (system, benchmark), as MLPerf scores it: one score table.
rule score:
    input:
        results=PLAN.all_runs(PLAN.out.result),
        verdicts=PLAN.all_runs(PLAN.out.verdict),
        summaries=PLAN.all_runs(PLAN.out.summary),
    output:
        PLAN.out.scores,
    params:
        results=PLAN.all_runs(lambda s, b, i: f"{s}/{b}={PLAN.out.result(s, b, i)}"),
        ruleset=PLAN.config["ruleset"],
        division=PLAN.config["division"],
        # runs_to_run > runs: the median window of runs is scored (mlrepro/core/median_window.py)
        keep=[f"--keep={b}={spec.runs}" for b, spec in PLAN.benchmarks.items() if len(PLAN.run_indices(b)) > spec.runs],
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    log:
        PLAN.out.log("score"),
    shell:
        "{params.python:q} -m mlrepro.score --verify-hashes --results {params.results:q} --out {output:q} "
        "--ruleset {params.ruleset:q} --division {params.division:q} {params.keep:q} 2> {log:q} "
        "|| {params.python:q} -m mlrepro.core.joblog {log:q} $?"
