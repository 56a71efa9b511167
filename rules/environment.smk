# Stage 1: the software environment the runs use, per engine (native: this Python environment),
# and the system description the submission carries.
rule environment:
    output:
        INFO / "environment.json",
    params:
        engine=config["engine"],
        submission=json.dumps({"org": config["org"], "system": config["system"], "division": config["division"],
                               "status": config["status"], "threads": config["threads_per_run"],
                               "device": config["device"]}),
    log:
        INFO / "logs" / "environment.log",
    shell:
        "{PY} -m mlrepro.record_environment --engine {params.engine} --submission {params.submission:q} "
        "--out {output:q} 2> {log}"
