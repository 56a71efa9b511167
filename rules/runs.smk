# Stage 3: N runs per (system, benchmark), each its own job with its own seed, the telemetry sampler beside it.
# A folder with run.sub runs one experiment of it in the run's allocation; ours and other folders run their
# run_and_time.sh (mlrepro.runs.driver).
from mlrepro.core.smk import SLURM_EXECUTOR, executor, signature_once


# Each config file, sourced by bash in a job (never while the DAG is built) into a record named by what it read
# (mlrepro/runs/capture.py): a changed file of its folder is a new record, so this job runs and, after it, the runs
# that read it (their input is new); a touched file or a moved folder is none. The job checks every (system, benchmark)
# that reads the record against its variables (what run.sub needs set, found by running it; DGXNNODES against the
# system's nodes; on Slurm their job shapes against the partition) and fails naming them. The runs, the launch files, the specs and the preview
# take the record as an ancient input: a record made again with the same name (its rule changed) keeps them. Not a
# checkpoint: Snakemake would then make every job that reads a record again at each invocation (a third of a no-op's
# time at 900 runs: benchmarks/planning_scale.py).
rule capture:
    input:
        # none: the config file is sourced in place (a reproduction's: its staged copy, in its image)
        unpack(lambda w: PLAN.capture_inputs(w.key)),
    output:
        PLAN.out.capture("{key}"),
    params:
        # functions of the output, which Snakemake does not track: the record's name is what it captures
        config=lambda w, output: str(PLAN.capture_source(w.key)),
        checks=lambda w, output: PLAN.capture_checks(w.key),
        # each run.sub that reads it, run as a run runs it: what it needs set (mlrepro/runs/demands.py)
        runs=lambda w, output: PLAN.capture_runs(w.key),
        # profiles/slurm: the preflight of the shapes it gives (rules/common.smk's onstart checks those known then)
        preflight=lambda w, output: PLAN.capture_preflight(w.key) if executor() == SLURM_EXECUTOR else None,
    wildcard_constraints:
        key=PLAN.capture_pattern,
    log:
        PLAN.out.log("capture_{key}"),
    localrule: True
    script:
        "dispatch.py"


# The unit's capture record, as the jobs that read it take it: ancient (see the capture rule).
_captured = planning.inputs.capture_record(PLAN, ancient)


# Each (system, benchmark)'s launch file: how its runs are launched, pipeline keys included (to read, to preview,
# to start a run by hand). Nothing depends on it but `all`: each run is given the same spec in its params.
rule launch:
    input:
        _captured,
    output:
        PLAN.out.launch("{system}", "{benchmark}"),
    params:
        # the spec, a function of the input (not tracked: <TBD> until the record exists); what is tracked is known
        # before (PLAN.rerun.basis: the spec of a stand-in record; the record is the input, named by what it captured)
        spec=signature_once(lambda w, input: PLAN.launch_params(w.system, w.benchmark)),
        basis=signature_once(lambda w: PLAN.rerun.basis(lambda plan: plan.launch_params(w.system, w.benchmark))),
    log:
        PLAN.out.log("launch_{system}_{benchmark}"),
    localrule: True
    script:
        "dispatch.py"


rule run:
    input:
        unpack(planning.inputs.run_inputs(PLAN, PREPARE)),
        capture=_captured,
    output:
        result=PLAN.out.result("{system}", "{benchmark}", "{run}"),
        summary=PLAN.out.summary("{system}", "{benchmark}", "{run}"),
    params:
        # In params, so that they re-run a run when they change; the pipeline keys stay out (the launch spec).
        computes=signature_once(lambda w: PLAN.rerun.launch_digest(w.system, w.benchmark)),
        seed=signature_once(lambda w: PLAN.run_seed(w.benchmark, int(w.run))),
        device=PLAN.config["device"],
        drop_caches=PLAN.config["drop_caches"],
        hz=PLAN.telemetry_hz,
        backend=PLAN.config["telemetry"].get("backend", "nvml"),
        # not run-changing: where the run's folder is, whether its image is locked, which GPUs it may claim (outside
        # Slurm: this host's GPU lock folder, config gpu_lock_dir; none: the user's own)
        run_dir=str(PLAN.out.run_dir("{system}", "{benchmark}", "{run}")),
        # (a function of the input, as the image record it checks: untracked, the image mode changes no result)
        locked=False if PLAN.native else signature_once(lambda w, input: PLAN.config["images"] == "locked"),
        gpu_locks=PLAN.config.get("gpu_lock_dir") or None,
        gpus=str(PLAN.config["gpus"]),
        # how the run is launched, pipeline keys included: a function of the input, which Snakemake does not track
        launch=signature_once(lambda w, input: PLAN.launch_params(w.system, w.benchmark)),
    threads: PLAN.config["threads_per_run"]
    resources:
        # Snakemake's local queueing only (the default profile passes this machine's count as --resources gpus=N);
        # which GPUs a run gets, the driver finds where it runs (mlrepro/runs/accelerators.py)
        gpus=signature_once(lambda w: PLAN.scheduled_gpus(w.system, w.benchmark)),
        # the job's shape on Slurm (profiles/slurm): nodes, tasks, runtime, ... from run_shape
        **PLAN.run_resources(),
    log:
        PLAN.out.log("run_{system}_{benchmark}_{run}"),
    benchmark:
        PLAN.out.bench("run_{system}_{benchmark}_{run}")
    script:
        "dispatch.py"
