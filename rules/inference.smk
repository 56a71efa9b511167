# Stage 8 (opt-in: inference.benchmarks): the converged checkpoints served through the official LoadGen.
#   inference_conf:    user.conf per benchmark (official minimums, or shortened and marked not submittable)
#   inference_run:     one (benchmark, scenario, mode) per job and process, as LoadGen's rules require
#   inference_package: the inference submission layout with LoadGen's own files
#   inference_check:   the rules' checks on it (a hard gate; the official checker is not on PyPI)
# all by the declared round's rules (inference.round: v2.0 or v6.1; mlrepro/inference/rounds.py)
#   inference_report:  the seed-style inference table and latency plots
INF_MODES = ["performance", "accuracy"]
INF_ROUND = PLAN.config["inference"]["round"]


wildcard_constraints:
    ibench="|".join(PLAN.inference_benchmarks) or "none",
    scenario="SingleStream|MultiStream|Server|Offline",
    mode="performance|accuracy",


rule inference_conf:
    input:
        [PLAN.config["inference"]["user_conf"]] if PLAN.config["inference"].get("user_conf") else [],
    output:
        PLAN.out.user_conf("{ibench}"),
    params:
        samples=lambda w: PLAN.benchmarks[w.ibench].params["data"]["eval_samples"],
        shortened=["--shortened"] if PLAN.config["inference"]["shortened"] else [],
        source=lambda w, input: ["--from", str(input[0])] if input else [],
        round=INF_ROUND,
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    log:
        PLAN.out.log("inference_conf_{ibench}"),
    shell:
        "{params.python:q} -m mlrepro.inference.settings --benchmark {wildcards.ibench:q} --samples {params.samples:q} "
        "--round {params.round:q} {params.shortened:q} {params.source:q} --out {output:q} 2> {log:q} "
        "|| {params.python:q} -m mlrepro.core.joblog {log:q} $?"


rule inference_run:
    input:
        runs=lambda w: PLAN.inference_runs(w.ibench),
        manifest=PLAN.generated_manifest("{ibench}"),
        conf=rules.inference_conf.output[0],
        spec=PLAN.out.spec("inference-{ibench}"),
    output:
        directory(PLAN.out.inference_run("{ibench}", "{scenario}", "{mode}")),
    params:
        data=lambda w: PLAN.out.generated_data(w.ibench),
        shortened=["--shortened"] if PLAN.config["inference"]["shortened"] else [],
        device=PLAN.config["device"],
        hz=PLAN.telemetry_hz,
        round=INF_ROUND,
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    threads: PLAN.config["threads_per_run"]
    log:
        PLAN.out.log("inference_{ibench}_{scenario}_{mode}"),
    benchmark:
        PLAN.out.bench("inference_{ibench}_{scenario}_{mode}")
    shell:
        "{params.python:q} -m mlrepro.inference.run --benchmark {wildcards.ibench:q} --scenario {wildcards.scenario:q} "
        "--mode {wildcards.mode:q} --runs {input.runs:q} --data-dir {params.data:q} --params-file {input.spec:q} "
        "--user-conf {input.conf:q} {params.shortened:q} --out {output:q} --device {params.device:q} "
        "--threads {threads:q} --telemetry-hz {params.hz:q} --round {params.round:q} > {log:q} 2>&1 "
        "|| {params.python:q} -m mlrepro.core.joblog {log:q} $?"


rule inference_package:
    input:
        runs=[PLAN.out.inference_run(b, s, m) for b, scens in PLAN.inference_scenarios.items()
              for s in scens for m in INF_MODES],
        confs=[PLAN.out.user_conf(b) for b in PLAN.inference_benchmarks],
    output:
        directory(PLAN.out.inference / "package"),
    params:
        runs_dir=PLAN.out.inference / "runs",
        confs=[f"{b}={PLAN.out.user_conf(b)}" for b in PLAN.inference_benchmarks],
        org=PLAN.config["org"],
        division=PLAN.config["division"],
        status=PLAN.config["status"],
        system=PLAN.system,
        device=PLAN.config["device"],
        threads=PLAN.config["threads_per_run"],
        round=INF_ROUND,
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    log:
        PLAN.out.log("inference_package"),
    shell:
        "{params.python:q} -m mlrepro.inference.package --runs-dir {params.runs_dir:q} --user-conf {params.confs:q} "
        "--out {output:q} --org {params.org:q} --division {params.division:q} --status {params.status:q} "
        "--system {params.system:q} --device {params.device:q} --threads {params.threads:q} --round {params.round:q} "
        "2> {log:q} || {params.python:q} -m mlrepro.core.joblog {log:q} $?"


rule inference_check:
    input:
        rules.inference_package.output[0],
    output:
        PLAN.out.inference / "check.json",
    params:
        round=INF_ROUND,
        python=PLAN.python,
    log:
        PLAN.out.log("inference_check"),
    shell:
        "{params.python:q} -m mlrepro.inference.check --package {input:q} --round {params.round:q} --out {output:q} "
        "2> {log:q} || {params.python:q} -m mlrepro.core.joblog {log:q} $?"


rule inference_report:
    input:
        check=rules.inference_check.output[0],
        runs=rules.inference_package.input.runs,
    output:
        html=PLAN.out.inference / "report.html",
        table=PLAN.out.inference / "table.csv",
    params:
        runs_dir=PLAN.out.inference / "runs",
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    log:
        PLAN.out.log("inference_report"),
    shell:
        "{params.python:q} -m mlrepro.inference.report --check {input.check:q} --runs-dir {params.runs_dir:q} "
        "--out {output.html:q} --csv {output.table:q} 2> {log:q} || {params.python:q} -m mlrepro.core.joblog {log:q} $?"
