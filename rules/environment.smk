# Stage 1: the software environment the runs use, per engine (native: this Python environment),
# and the system description the submission carries.
rule environment:
    input:
        spec=PLAN.out.spec("environment"),
        image=PLAN.image_records,
    output:
        PLAN.out.environment,
    params:
        engine=lambda w, input: PLAN.engine_options(input.image),
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    log:
        PLAN.out.log("environment"),
    shell:
        "{params.python:q} -m mlrepro.environment.record {params.engine:q} --spec {input.spec:q} "
        "--out {output:q} 2> {log:q} || {params.python:q} -m mlrepro.core.joblog {log:q} $?"
