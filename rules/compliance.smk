# Stage 4 (a hard gate): every result file through the official compliance checker, of the release that
# judges the ruleset (logging_release; else the installed mlperf_logging).
rule compliance:
    input:
        result=rules.run.output.result,
        summary=rules.run.output.summary,
    output:
        PLAN.out.verdict("{system}", "{benchmark}", "{run}"),
    params:
        usage=PLAN.config["usage"],
        ruleset=PLAN.config["ruleset"],
        release=PLAN.logging_release,
    log:
        PLAN.out.log("compliance_{system}_{benchmark}_{run}"),
    script:
        "dispatch.py"
