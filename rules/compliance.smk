# Stage 4 (a hard gate): every result file through the official compliance checker, of the release that
# judges the ruleset (logging_release; else the releases table's, installed by rules/release.smk; else the installed
# mlperf_logging).
RELEASE = {"stamps": PLAN.release_stamps, "ruleset": PLAN.config["ruleset"], "usage": PLAN.config["usage"],
           "log": PLAN.out.log("judging_release")}


include: "release.smk"


rule compliance:
    input:
        result=rules.run.output.result,
        summary=rules.run.output.summary,
        release=[ancient(s) for s in PLAN.release_stamps],
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
