# Stage 8 (opt-in: inference.benchmarks): the converged checkpoints served through the official LoadGen.
#   inference_conf:    user.conf per benchmark (official minimums, or shortened and marked not submittable)
#   inference_run:     one (benchmark, scenario, mode) per job and process, as LoadGen's rules require
#   inference_package: the inference submission layout with LoadGen's own files
#   inference_check:   the rules' checks on it (a hard gate; the official checker is not on PyPI)
#   inference_report:  the seed-style inference table and latency plots
INF = OUT / "inference"
INF_CONF = config["inference"]
# served: our own models only (a vendor implementation's checkpoint is not ours to load)
INF_BENCHMARKS = [b for b in INF_CONF["benchmarks"] if b in BENCHMARKS and BENCHMARKS[b].mini]
INF_SCENARIOS = INF_CONF["scenarios"]
INF_MODES = ["performance", "accuracy"]
INFERENCE_TARGETS = [INF / "report.html"] if INF_BENCHMARKS else []


wildcard_constraints:
    ibench="|".join(INF_BENCHMARKS) or "none",
    scenario="SingleStream|MultiStream|Server|Offline",
    mode="performance|accuracy",


def inference_runs(wildcards):
    return [OUT / "runs" / wildcards.ibench / str(i) / "run.json" for i in run_indices(wildcards.ibench)]


rule inference_conf:
    input:
        [INF_CONF["user_conf"]] if INF_CONF.get("user_conf") else [],
    output:
        INF / "conf" / "{ibench}.user.conf",
    params:
        samples=lambda w: BENCHMARKS[w.ibench].params["data"]["eval_samples"],
        shortened=["--shortened"] if INF_CONF["shortened"] else [],
        source=lambda w, input: ["--from", str(input[0])] if input else [],
    shell:
        "{PY} -m mlrepro.inference.settings --benchmark {wildcards.ibench:q} --samples {params.samples:q} "
        "{params.shortened:q} {params.source:q} --out {output:q}"


rule inference_run:
    input:
        runs=inference_runs,
        manifest=OUT / "data" / "{ibench}" / _data.MANIFEST,
        conf=INF / "conf" / "{ibench}.user.conf",
    output:
        directory(INF / "runs" / "{ibench}" / "{scenario}" / "{mode}"),
    params:
        data=lambda w: OUT / "data" / w.ibench,
        spec=lambda w: json.dumps(BENCHMARKS[w.ibench].params, sort_keys=True),
        shortened=["--shortened"] if INF_CONF["shortened"] else [],
        device=config["device"],
        hz=config["telemetry"]["hz"] if config["telemetry"]["enabled"] else 0,
    threads: config["threads_per_run"]
    log:
        INFO / "logs" / "inference_{ibench}_{scenario}_{mode}.log",
    benchmark:
        INFO / "benchmarks" / "inference_{ibench}_{scenario}_{mode}.tsv"
    shell:
        "{PY} -m mlrepro.inference.run --benchmark {wildcards.ibench:q} --scenario {wildcards.scenario:q} "
        "--mode {wildcards.mode:q} --runs {input.runs:q} --data-dir {params.data:q} --params {params.spec:q} "
        "--user-conf {input.conf:q} {params.shortened:q} --out {output:q} --device {params.device:q} "
        "--threads {threads} --telemetry-hz {params.hz:q} > {log:q} 2>&1"


rule inference_package:
    input:
        runs=expand(INF / "runs" / "{ibench}" / "{scenario}" / "{mode}", ibench=INF_BENCHMARKS,
                    scenario=INF_SCENARIOS, mode=INF_MODES),
        confs=expand(INF / "conf" / "{ibench}.user.conf", ibench=INF_BENCHMARKS),
    output:
        directory(INF / "package"),
    params:
        runs_dir=INF / "runs",
        confs=[f"{b}={INF / 'conf' / f'{b}.user.conf'}" for b in INF_BENCHMARKS],
        status=config["status"],
        device=config["device"],
    shell:
        "{PY} -m mlrepro.inference.package --runs-dir {params.runs_dir:q} --user-conf {params.confs:q} "
        "--out {output:q} --org {config[org]:q} --division {config[division]:q} --status {params.status:q} "
        "--system {SYSTEM:q} --device {params.device:q} --threads {config[threads_per_run]}"


rule inference_check:
    input:
        INF / "package",
    output:
        INF / "check.json",
    shell:
        "{PY} -m mlrepro.inference.check --package {input:q} --out {output:q}"


rule inference_report:
    input:
        check=INF / "check.json",
        runs=rules.inference_package.input.runs,
    output:
        html=INF / "report.html",
        table=INF / "table.csv",
    params:
        runs_dir=INF / "runs",
    shell:
        "{PY} -m mlrepro.inference.report --check {input.check:q} --runs-dir {params.runs_dir:q} "
        "--out {output.html:q} --csv {output.table:q}"
