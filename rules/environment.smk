# Stage 1: the software environment the runs use, per engine (native: this Python environment),
# and the system description the submission carries.
rule environment:
    input:
        image=lambda w: [] if config["engine"] == "native" else
        [OUT / "containers" / f"{image}.json" for image in sorted({b.image for b in BENCHMARKS.values()})],
    output:
        INFO / "environment.json",
    params:
        engine=lambda w, input: engine_options(input.image),
        submission=json.dumps({"org": config["org"], "system": config["system"], "division": config["division"],
                               "status": config["status"], "threads": config["threads_per_run"],
                               "device": config["device"]}),
    log:
        INFO / "logs" / "environment.log",
    shell:
        "{PY} -m mlrepro.environment.record {params.engine:q} --submission {params.submission:q} "
        "--out {output:q} 2> {log:q}"
