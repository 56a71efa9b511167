# Stage 3: N runs per benchmark, each its own job with its own seed, the telemetry sampler beside it.
# Every implementation, ours and a vendor's, runs through its run_and_time.sh (mlrepro.runs.driver).
from mlrepro.core import smk as _smk
import hashlib
import math

import os

from mlrepro.core import atomic as _atomic
from mlrepro.runs import warm
from mlrepro.slurm.resources import run_resources, shape_for, shape_from_config_sh
from mlrepro.runs.accelerators import machine_gpus

# The GPUs runs share out; the default profile passes the same count as --resources gpus.
MACHINE_GPUS = machine_gpus() if config["gpus"] == "auto" else int(config["gpus"])


def _launch_digest(b):
    """What a run computes from: captured config, hyperparameters, implementation files. Not runs, image
    name, implementation path or mounts (pipeline keys: changing them keeps finished runs)."""
    spec = {"env": b.implementation.env, "params": b.params, "files": b.implementation.digest()}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


# The warm parent, if any, serves this process (and this host) only and exits with it. In the
# environment, not in a rule's params: turning it off or on does not make finished runs stale.
if config["engine"] == "native" and config["warm_start"]:
    os.environ[warm.OWNER_ENV] = warm.owner_here()
else:
    os.environ.pop(warm.OWNER_ENV, None)

LAUNCH_DIGEST = {name: _launch_digest(b) for name, b in BENCHMARKS.items()}


def run_gpus(benchmark):
    """Accelerators a run holds: nodes x GPUs per node of its config; ours one when it trains on a GPU."""
    b = BENCHMARKS[benchmark]
    if b.implementation.gpus == 0 and b.mini and run_device() == "cuda":
        return 1
    return b.implementation.gpus


def run_device():
    device = config["device"]
    if device == "auto":
        return "cuda" if MACHINE_GPUS else "cpu"
    return "cuda" if device.startswith("cuda") else "cpu"


def image_record(wildcards):
    """Container engines run the benchmark's built image; native runs need none."""
    if config["engine"] == "native":
        return []
    return [OUT / "containers" / f"{BENCHMARKS[wildcards.benchmark].image}.json"]


def run_inputs(wildcards):
    inputs = {"image": image_record(wildcards)}
    if BENCHMARKS[wildcards.benchmark].mini:  # ours: its data choice (rules/data.smk); a vendor's: data_dir
        inputs["manifest"] = dataset_ready(wildcards.benchmark)
    return inputs


def run_shape(benchmark):
    """Nodes, processes per node, GPUs and walltime of a run: job_shapes.<benchmark> in the config, else the
    implementation's config file (DGXNNODES, DGXNGPU, WALLTIME)."""
    if benchmark in config["job_shapes"]:
        return shape_for(config, benchmark)
    return shape_from_config_sh(BENCHMARKS[benchmark].implementation.env)


def launch_spec(benchmark):
    b = BENCHMARKS[benchmark]
    impl = b.implementation
    data_dir = Path(dataset_dir(benchmark)).resolve() if b.mini else b.data_dir
    return {"benchmark": benchmark, "kind": impl.kind, "name": impl.name,
            "folder": str(impl.folder), "config_file": impl.config_file.name,
            "script_in_container": impl.script_in_container(), "env": impl.env, "params": b.params,
            "data_dir": str(data_dir), "data_mount": impl.data_mount, "log_mount": impl.log_mount,
            "gpus": run_gpus(benchmark), "threads": config["threads_per_run"],
            # processes the driver starts per node (srun/torchrun): those of job_shapes; a config file's
            # run_and_time.sh starts its own per GPU, as run_with_docker.sh runs it once per node
            "nodes": run_shape(benchmark).nodes,
            "tasks_per_node": run_shape(benchmark).tasks_per_node if benchmark in config["job_shapes"] else 1,
            "device": config["device"], "drop_caches": config["drop_caches"],
            "submission": json.loads(submission_json())}


# How every run of a benchmark is launched, pipeline keys included: written when the DAG is built
# (not a job: a rewritten input would re-run the runs), read by each run. What a run computes from is
# in its params (LAUNCH_DIGEST), so a moved folder or other mounts keep finished runs.
if not _smk.dry_run(workflow):
    for _name in BENCHMARKS:
        _launch = OUT / "runs" / _name / "launch.json"
        _text = json.dumps(launch_spec(_name), sort_keys=True, indent=1) + "\n"
        if not _launch.is_file() or _launch.read_text() != _text:
            _atomic.write_text(_launch, _text)


rule run:
    input:
        unpack(run_inputs),
    output:
        result=OUT / "runs" / "{benchmark}" / "{run}" / "result.txt",
        summary=OUT / "runs" / "{benchmark}" / "{run}" / "run.json",
    params:
        # In params, so that they re-run a run when they change; the pipeline keys stay out (run:).
        computes=lambda w: LAUNCH_DIGEST[w.benchmark],
        seed=lambda w: run_seed(config["seed"], w.benchmark, int(w.run)),
        device=config["device"],
        drop_caches=config["drop_caches"],
        hz=config["telemetry"]["hz"] if config["telemetry"]["enabled"] else 0,
        # not run-changing: where the run's folder is, how the engine is reached, which GPUs it may claim
        run_dir=lambda w: OUT / "runs" / w.benchmark / w.run,
        launch=lambda w: OUT / "runs" / w.benchmark / "launch.json",
        engine=lambda w, input: engine_options(input.image),
        locks=OUT / ".gpu_locks",
    threads: config["threads_per_run"]
    resources:
        # GPUs this machine shares out (the default profile passes its count as --resources gpus=N)
        gpus=lambda w: run_gpus(w.benchmark),
        # the job's shape on Slurm (profiles/slurm): nodes, tasks, runtime, ... from run_shape
        **run_resources(config, config["threads_per_run"], run_shape),
    log:
        INFO / "logs" / "run_{benchmark}_{run}.log",
    benchmark:
        INFO / "benchmarks" / "run_{benchmark}_{run}.tsv"
    shell:
        "{PY} -m mlrepro.runs.driver --launch {params.launch:q} --seed {params.seed:q} --run-dir {params.run_dir:q} "
        "{params.engine:q} --gpu-locks {params.locks:q} --machine-gpus {MACHINE_GPUS} "
        "--telemetry-hz {params.hz:q} > {log:q} 2>&1"
