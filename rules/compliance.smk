# Stage 4 (a hard gate): every result file through the official compliance checker, of the release that
# judges the ruleset (logging_release; else the installed mlperf_logging).
from mlrepro.core import rulesets

rule compliance:
    input:
        result=rules.run.output.result,
        summary=rules.run.output.summary,
    output:
        PLAN.out.verdict("{system}", "{benchmark}", "{run}"),
    params:
        usage=PLAN.config["usage"],
        ruleset=PLAN.config["ruleset"],
        release=rulesets.release_args(PLAN.config),
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    log:
        PLAN.out.log("compliance_{system}_{benchmark}_{run}"),
    shell:
        "{params.python:q} -m mlrepro.gate.compliance {input.result:q} --run-json {input.summary:q} "
        "--usage {params.usage:q} --ruleset {params.ruleset:q} {params.release:q} --out {output:q} 2> {log:q} "
        # on failure: the log's end, or why it is empty (a full disk: mlrepro/core/joblog.py)
        "|| {params.python:q} -m mlrepro.core.joblog {log:q} $?"
