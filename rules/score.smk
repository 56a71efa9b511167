# Stage 6: the olympic mean per (system, benchmark), as MLPerf scores it: one score table.
rule score:
    input:
        results=PLAN.all_runs(PLAN.out.result),
        verdicts=PLAN.all_runs(PLAN.out.verdict),
        summaries=PLAN.all_runs(PLAN.out.summary),
    output:
        PLAN.out.scores,
    params:
        runs=lambda w: PLAN.result_files,
        # runs_to_run > runs: the median window of runs is scored (mlrepro/core/median_window.py)
        keep=PLAN.kept_runs,
        ruleset=PLAN.config["ruleset"],
        division=PLAN.config["division"],
    log:
        PLAN.out.log("score"),
    script:
        "dispatch.py"
