# Stage 3: N runs per benchmark, each its own job with its own seed, the telemetry sampler beside it.



def image_record(wildcards):
    """Container engines run the benchmark's built image; native runs need none."""
    if config["engine"] == "native":
        return []
    return [OUT / "containers" / f"{BENCHMARKS[wildcards.benchmark].image}.json"]


rule run:
    input:
        manifest=OUT / "data" / "{benchmark}" / _data.MANIFEST,
        image=image_record,
    output:
        result=OUT / "runs" / "{benchmark}" / "{run}" / "result.txt",
        summary=OUT / "runs" / "{benchmark}" / "{run}" / "run.json",
    params:
        data=lambda w: OUT / "data" / w.benchmark,
        run_dir=lambda w: OUT / "runs" / w.benchmark / w.run,
        spec=lambda w: json.dumps(BENCHMARKS[w.benchmark].params, sort_keys=True),
        seed=lambda w: run_seed(config["seed"], w.benchmark, int(w.run)),
        submission=submission_json(),
        engine=lambda w, input: engine_options(input.image),
        device=config["device"],
        drop_caches="--drop-caches" if config["drop_caches"] else "",
        hz=config["telemetry"]["hz"] if config["telemetry"]["enabled"] else 0,
    threads: config["threads_per_run"]
    log:
        INFO / "logs" / "run_{benchmark}_{run}.log",
    benchmark:
        INFO / "benchmarks" / "run_{benchmark}_{run}.tsv"
    shell:
        "{PY} -m mlrepro.run_job --benchmark {wildcards.benchmark:q} --data-dir {params.data:q} "
        "--params {params.spec:q} --seed {params.seed:q} --run-dir {params.run_dir:q} "
        "--submission {params.submission:q} {params.engine} "
        "--device {params.device:q} --threads {threads} {params.drop_caches} "
        "--telemetry-hz {params.hz:q} > {log:q} 2>&1"
