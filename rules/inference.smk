# Stage 8 (opt-in: inference.benchmarks): the converged checkpoints served through the official LoadGen.
#   inference_conf:    user.conf per benchmark (official minimums, or shortened and marked not submittable)
#   inference_run:     one (benchmark, scenario, mode) per job and process, as LoadGen's rules require
#   inference_package: the inference submission layout with LoadGen's own files
#   inference_check:   the rules' checks on it (a hard gate; the official checker is not on PyPI)
# all by the declared round's rules (inference.round: v2.0 or v6.1; mlrepro/inference/rounds.py)
#   inference_report:  the seed-style inference table and latency plots
INF_MODES = ["performance", "accuracy"]
INF_ROUND = PLAN.config["inference"]["round"]
INF_SHORTENED = bool(PLAN.config["inference"]["shortened"])


wildcard_constraints:
    ibench="|".join(PLAN.inference_benchmarks) or "none",
    scenario="SingleStream|MultiStream|Server|Offline",
    mode="performance|accuracy",


rule inference_conf:
    input:
        # the user's own user.conf, copied as it is
        [PLAN.config["inference"]["user_conf"]] if PLAN.config["inference"].get("user_conf") else [],
    output:
        PLAN.out.user_conf("{ibench}"),
    params:
        samples=lambda w: PLAN.benchmarks[w.ibench].params["data"]["eval_samples"],
        shortened=INF_SHORTENED,
        round=INF_ROUND,
    log:
        PLAN.out.log("inference_conf_{ibench}"),
    script:
        "dispatch.py"


rule inference_run:
    input:
        runs=lambda w: PLAN.inference_runs(w.ibench),
        manifest=PLAN.generated_manifest("{ibench}"),
        conf=rules.inference_conf.output[0],
    output:
        directory(PLAN.out.inference_run("{ibench}", "{scenario}", "{mode}")),
    params:
        data=lambda w: PLAN.out.generated_data(w.ibench),
        spec=lambda w: PLAN.inference_spec(w.ibench),
        shortened=INF_SHORTENED,
        device=PLAN.config["device"],
        hz=PLAN.telemetry_hz,
        round=INF_ROUND,
    threads: PLAN.config["threads_per_run"]
    log:
        PLAN.out.log("inference_{ibench}_{scenario}_{mode}"),
    benchmark:
        PLAN.out.bench("inference_{ibench}_{scenario}_{mode}")
    script:
        "dispatch.py"


rule inference_package:
    input:
        runs=[PLAN.out.inference_run(b, s, m) for b, scens in PLAN.inference_scenarios.items()
              for s in scens for m in INF_MODES],
        confs=[PLAN.out.user_conf(b) for b in PLAN.inference_benchmarks],
        audits=[PLAN.out.inference_audit_test(*test) for test in INF_AUDIT_TESTS],  # rules/inference_audit_tests.smk
    output:
        directory(PLAN.out.inference / "package"),
    params:
        runs_dir=PLAN.out.inference / "runs",
        audits_dir=PLAN.out.inference / "audit_tests" if INF_AUDIT_TESTS else "",
        confs={b: str(PLAN.out.user_conf(b)) for b in PLAN.inference_benchmarks},
        org=PLAN.config["org"],
        division=PLAN.config["division"],
        status=PLAN.config["status"],
        system=PLAN.system,
        device=PLAN.config["device"],
        threads=PLAN.config["threads_per_run"],
        round=INF_ROUND,
    log:
        PLAN.out.log("inference_package"),
    script:
        "dispatch.py"


rule inference_check:
    input:
        rules.inference_package.output[0],
    output:
        PLAN.out.inference / "check.json",
    params:
        round=INF_ROUND,
    log:
        PLAN.out.log("inference_check"),
    script:
        "dispatch.py"


rule inference_report:
    input:
        check=rules.inference_check.output[0],
        runs=rules.inference_package.input.runs,
    output:
        html=PLAN.out.inference / "report.html",
        table=PLAN.out.inference / "table.csv",
    params:
        runs_dir=PLAN.out.inference / "runs",
    log:
        PLAN.out.log("inference_report"),
    script:
        "dispatch.py"
