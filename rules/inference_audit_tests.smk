# Stage 8b (with the inference stage, unless inference.audit_tests is false): the declared round's audit tests of
# every served (benchmark, scenario), as its checker requires them of the model (mlrepro/inference/rounds.py
# Audits: v2.0 TEST01, TEST04 (A and B) and TEST05; v6.1 TEST01 and TEST04). One job per test: its LoadGen runs,
# each in a working folder of its own with its audit.config, at the submission run's settings, then the round's
# verification (mlrepro/inference/audit_tests.py): the official files of a checkout of mlcommons/inference named
# by inference.mlcommons_inference, else ours. inference_package puts what they write where the checker looks.
from mlrepro.inference import rounds as inf_rounds

INF_AUDIT_ROUND = inf_rounds.get(PLAN.config["inference"]["round"])
INF_AUDIT_TESTS = [
    (b, s, t) for b, scens in PLAN.inference_scenarios.items() for s in scens
    for t in (INF_AUDIT_ROUND.audits.tests(INF_AUDIT_ROUND.model(b)) if INF_AUDIT_ROUND.audits else [])
] if PLAN.config["inference"]["audit_tests"] else []


rule inference_audit_test:
    input:
        runs=lambda w: PLAN.inference_runs(w.ibench),
        manifest=PLAN.generated_manifest("{ibench}"),
        conf=PLAN.out.user_conf("{ibench}"),
        performance=PLAN.out.inference_run("{ibench}", "{scenario}", "performance"),
        accuracy=PLAN.out.inference_run("{ibench}", "{scenario}", "accuracy"),
    output:
        directory(PLAN.out.inference_audit_test("{ibench}", "{scenario}", "{test}")),
    wildcard_constraints:
        ibench="|".join(PLAN.inference_benchmarks) or "none",
        scenario="SingleStream|MultiStream|Server|Offline",
        test="TEST0[1-9]",
    params:
        data=lambda w: PLAN.out.generated_data(w.ibench),
        spec=lambda w: PLAN.inference_spec(w.ibench),
        shortened=bool(PLAN.config["inference"]["shortened"]),
        device=PLAN.config["device"],
        round=INF_AUDIT_ROUND.name,
        mlcommons=PLAN.config["inference"].get("mlcommons_inference", ""),
    threads: PLAN.config["threads_per_run"]
    log:
        PLAN.out.log("inference_audit_test_{ibench}_{scenario}_{test}"),
    benchmark:
        PLAN.out.bench("inference_audit_test_{ibench}_{scenario}_{test}")
    script:
        "dispatch.py"
