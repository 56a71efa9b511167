# Stage 1: the software environment the runs use, per engine (native: this Python environment),
# and the system description the submission carries.
rule environment:
    input:
        image=lambda w: [] if config["engine"] == "native" else
        [OUT / "containers" / f"{image}.json" for image in sorted({b.image for b in BENCHMARKS.values()})],
    output:
        INFO / "environment.json",
    params:
        engine=config["engine"],
        image=lambda w, input: f"--image-record {shlex.quote(input.image[0])}" if input.image else "",
        locked="--locked" if config["images"] == "locked" else "",
        socket=f"--engine-socket {shlex.quote(config['engine_socket'])}" if config["engine_socket"] else "",
        submission=json.dumps({"org": config["org"], "system": config["system"], "division": config["division"],
                               "status": config["status"], "threads": config["threads_per_run"],
                               "device": config["device"]}),
    log:
        INFO / "logs" / "environment.log",
    shell:
        "{PY} -m mlrepro.record_environment --engine {params.engine} {params.socket} {params.image} {params.locked} --submission {params.submission:q} "
        "--out {output:q} 2> {log}"
