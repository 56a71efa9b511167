# Stage 3: N runs per (system, benchmark), each its own job with its own seed, the telemetry sampler beside it.
# A folder with run.sub runs one experiment of it in the run's allocation; ours and other folders run their
# run_and_time.sh (mlrepro.runs.driver).
from mlrepro.core.smk import signature_once
from mlrepro.slurm.resources import run_resources


rule run:
    input:
        unpack(planning.inputs.run_inputs(PLAN, PREPARE)),
    output:
        result=PLAN.out.result("{system}", "{benchmark}", "{run}"),
        summary=PLAN.out.summary("{system}", "{benchmark}", "{run}"),
    params:
        # In params, so that they re-run a run when they change; the pipeline keys stay out (the launch file).
        computes=signature_once(lambda w: PLAN.launch_digest(w.system, w.benchmark)),
        seed=signature_once(lambda w: PLAN.run_seed(w.benchmark, int(w.run))),
        device=PLAN.config["device"],
        drop_caches=PLAN.config["drop_caches"],
        hz=PLAN.telemetry_hz,
        backend=PLAN.config["telemetry"].get("backend", "nvml"),
        # not run-changing: where the run's folder is, how the engine is reached, which GPUs it may claim
        run_dir=str(PLAN.out.run_dir("{system}", "{benchmark}", "{run}")),
        # native: the same for every run (a value, not a call per job)
        engine=PLAN.engine_options([]) if PLAN.native else signature_once(lambda w, input: PLAN.engine_options(input.image)),
        # outside Slurm: this host's GPU lock folder (config gpu_lock_dir; empty: the user's own) and its GPUs
        locks=["--gpu-locks", PLAN.config["gpu_lock_dir"]] if PLAN.config.get("gpu_lock_dir") else [],
        machine=str(PLAN.config["gpus"]),
        # written by PREPARE before any job (mlrepro/planning/prepare.py), pipeline keys included
        launch=str(PLAN.out.launch("{system}", "{benchmark}")),
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    threads: PLAN.config["threads_per_run"]
    resources:
        # Snakemake's local queueing only (the default profile passes this machine's count as --resources gpus=N);
        # which GPUs a run gets, the driver finds where it runs (mlrepro/runs/accelerators.py)
        gpus=signature_once(lambda w: PLAN.scheduled_gpus(w.system, w.benchmark)),
        # the job's shape on Slurm (profiles/slurm): nodes, tasks, runtime, ... from run_shape
        **run_resources(PLAN.config, PLAN.config["threads_per_run"], PLAN.unit_shapes),
    log:
        PLAN.out.log("run_{system}_{benchmark}_{run}"),
    benchmark:
        PLAN.out.bench("run_{system}_{benchmark}_{run}")
    shell:
        "{params.python:q} -m mlrepro.runs.driver --launch {params.launch:q} --seed {params.seed:q} "
        "--run-dir {params.run_dir:q} {params.engine:q} {params.locks:q} "
        "--gpus {params.machine:q} --telemetry-hz {params.hz:q} --telemetry-backend {params.backend:q} > {log:q} 2>&1"
