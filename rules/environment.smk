# Stage 1: the software environment the runs use, per engine (native: this Python environment),
# and the system description the submission carries.
rule environment:
    input:
        image=PLAN.image_records,
    output:
        PLAN.out.environment,
    params:
        spec=lambda w: PLAN.environment_spec,
        locked=PLAN.config["images"] == "locked",
    log:
        PLAN.out.log("environment"),
    script:
        "dispatch.py"
