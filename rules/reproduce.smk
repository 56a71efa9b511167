# Reproduce mode: `snakemake --cores all --config reproduce=ORG_DIR system=SYSTEM only=[resnet] runs=K`.
# Re-runs the first K results of each chosen benchmark of a package with the package's own implementation
# folder (benchmarks/<bm>/implementations/<impl>/: run_and_time.sh and the config_<SYSTEM>.sh for the
# system, or `benchmarks: {<bm>: {system_config: FILE}}`), the submitted seeds, and the dataset regenerated
# by the implementation (ours) or given as `benchmarks: {<bm>: {data_dir: DIR}}` (a vendor's); through the
# pipeline's own run stage (rules/runs.smk: capture, launch, run; rules/compliance.smk), included here with the
# reproduction as its PLAN (mlrepro/reproduce/run_stage.py); then compares (mlrepro/reproduce/). Everything under
# reproduce_out, in the pipeline's layout, which one pipeline at a time may use (its lock, taken when jobs start).
# `benchmarks: {resnet: {lr: 0.2}}` in the config changes a parameter of the reproduction (a sensitivity check).
#
# The package is untrusted: while this file is parsed (also for -n, --list-rules, --summary, a job's own
# parse) it is only read, with bounds, and nothing is written or run, nor interpreted: the package is verified against
# its manifest, staged, its config file sourced (the capture, which gives the runs' job shape: <TBD> in a dry run
# until it has run) and its code run in jobs, from the staged copy, in this order; with a container engine, in the
# package's image.
import json
import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError

from mlrepro.core import outdir_lock as _outdir_lock
from mlrepro.core import smk as _smk
from mlrepro.package.provenance import MANIFEST as _PROVENANCE
from mlrepro.reproduce import plan as _plan
from mlrepro.reproduce.errors import ReproduceError
from mlrepro.reproduce.run_stage import ReproducedRuns

# Every step is a job through the project's one seam (rules/dispatch.py, mlrepro/jobs.py: the entry functions of
# mlrepro/reproduce/steps.py, and the run stage's), its arguments the rule's files and params.
RO = Path(config.get("reproduce_out") or "reproduction")
_DEFAULT_OUTDIR = yaml.safe_load((Path(workflow.basedir) / "config" / "config.yaml").read_text())["outdir"]
if config["outdir"] != _DEFAULT_OUTDIR:
    raise WorkflowError(f"outdir={config['outdir']}: reproduce mode writes everything under reproduce_out "
                        f"(now {RO}), not outdir; give reproduce_out={config['outdir']} instead.")
# Where a benchmark runs (not what it computes): kept out of the parameter overrides.
_WHERE = ("data_dir", "system_config")
_BLOCKS = {b: dict(o or {}) for b, o in (config.get("benchmarks") or {}).items()}
_OVERRIDES = {b: {k: v for k, v in o.items() if k not in _WHERE} for b, o in _BLOCKS.items()}
_OVERRIDES = {b: o for b, o in _OVERRIDES.items() if o}
_DATA_DIRS = {b: str(o["data_dir"]) for b, o in _BLOCKS.items() if o.get("data_dir")}
_SYSTEM_CONFIGS = {b: str(o["system_config"]) for b, o in _BLOCKS.items() if o.get("system_config")}
try:
    REPRO = _plan.plan(Path(config["reproduce"]), system=str(config["system"]), only=list(config["only"]),
                       runs=config.get("runs"), overrides=_OVERRIDES, default_data_seed=config["data_seed"],
                       data_dirs=_DATA_DIRS, system_configs=_SYSTEM_CONFIGS, engine=config["engine"])
except ReproduceError as _e:
    raise WorkflowError(str(_e)) from None
# Nothing is written into the package: neither our outputs nor Snakemake's .snakemake/ in the working folder.
_PACKAGE = Path(REPRO.package)
if Path.cwd().resolve().is_relative_to(_PACKAGE):
    raise WorkflowError(f"the working folder {Path.cwd().resolve()} lies inside the package {_PACKAGE}: Snakemake "
                        "writes its records there, and a reproduction never writes into the package it judges; "
                        "run from a folder outside it.")
if RO.resolve().is_relative_to(_PACKAGE) or _PACKAGE.is_relative_to(RO.resolve()):
    raise WorkflowError(f"reproduce_out={RO} ({RO.resolve()}) and the package {_PACKAGE} overlap: a reproduction "
                        "never writes into the package it judges; choose a folder outside it (and not above it).")
for _note in REPRO.notes:
    logger.warning(f"reproduce: {_note}")
for _b in REPRO.benchmarks.values():
    logger.info(f"reproduce: {_b.name}: {_b.run_folder} with {_b.config_file}, {len(_b.seeds)} run(s), "
                f"seeds {_b.seeds}")
# Where the package's code runs: in a container of the configured engine (mlrepro/reproduce/image.py), or natively.
_CONTAINED = config["engine"] != "native"
_CODE = (f"the package's own code (its config files, run_and_time.sh"
         f"{', data generator and training code' if any(b.kind == 'mini' for b in REPRO.benchmarks.values()) else ''})")
if _CONTAINED:
    logger.info(f"reproduce: {_CODE} will run in {config['engine']} containers built from its Dockerfiles, with only "
                f"its copy in {(RO / 'implementation').resolve()} (read-only), the dataset (read-only) and the "
                "outputs mounted; the package itself is only read, and checked unchanged at the end.")
else:
    logger.warning(f"reproduce: {_CODE} will run natively as you, with your rights, from a copy in "
                   f"{(RO / 'implementation').resolve()}: nothing stops it from writing elsewhere. The package is "
                   "hashed before and after, and any change is an error; to run the code in containers, give "
                   "engine=podman (or docker).")


onstart:
    # One reproduction at a time per reproduce_out (two working folders would run the same jobs and
    # overwrite each other's logs). Taken when jobs start: never for -n, --list-rules or --summary.
    try:
        _outdir_lock.acquire(RO)
    except _outdir_lock.OutdirLocked as _e:
        sys.exit(f"error: reproduce_out: {_e}")


onsuccess:
    # A package changed by its own code during the reproduction is an error of the whole run (its exit status),
    # not only of its report, which is kept and says what changed.
    _changes = (json.loads((RO / "reproduction.json").read_text()).get("package_changes")
                if (RO / "reproduction.json").is_file() else None)
    if _changes:
        raise WorkflowError(f"the package {_PACKAGE} changed while it was reproduced ({'; '.join(_changes[:20])}): "
                            f"its own code wrote into it (see {RO / 'reproduction.html'}); the reproduction is not "
                            "comparable. Reproduce from an intact copy, with engine=podman (or docker) to run its "
                            "code in a container.")


# the submitted results, as Snakemake can record their names (one that is not UTF-8: its folder)
_RESULT_FILES = _smk.utf8_paths([f for p in REPRO.benchmarks.values() for f in p.result_files], _PACKAGE)


# The run stage's rules read PLAN and PREPARE: the reproduction's. Its runs, launch files and verdicts are the
# pipeline's, under reproduce_out, with the package's system, judged by the release the pipeline's plan (the
# Snakefile's) finds for the ruleset; nothing of the run stage is planned twice.
PLAN = ReproducedRuns.for_reproduction(REPRO, config, RO, PLAN.logging_release, PLAN.release_stamps)
PREPARE = PLAN.prepare


def _image(wildcards):
    """The build record of the image a benchmark's code runs in; none natively."""
    return PLAN.image_record(wildcards.benchmark)


wildcard_constraints:
    benchmark=_smk.one_of(REPRO.benchmarks),
    system=PLAN.system_pattern,
    run=r"\d+",


# On a cluster (profiles/slurm) these run on the submit host: seconds of work each; data and runs are jobs.
localrules:
    reproduce_all,
    reproduce_verify,
    reproduce_plan,
    reproduce_stage,
    reproduce_image,
    reproduce_report,
    compliance,


rule reproduce_all:
    input:
        RO / "reproduction.html",
        RO / "reproduction.json",
        PLAN.launch_files,  # how the runs were launched (rules/runs.smk launch), to read or to start one by hand


rule reproduce_verify:
    # before anything of the package runs: its manifest (and the published hash) against its files
    input:
        [_PACKAGE / _PROVENANCE] if REPRO.manifest else [],
        _RESULT_FILES,
    output:
        RO / "package_check.json",
    params:
        package=REPRO.package,
        # the manifest's hash as the package's report published it (none: not checked against one)
        manifest_sha256=str(config["manifest_sha256"]) if config.get("manifest_sha256") else None,
    log:
        RO / "logs" / "verify.log",
    script:
        "dispatch.py"


rule reproduce_plan:
    # the plan made while this file was parsed, for the steps that follow
    output:
        RO / "plan.json",
    params:
        plan=_plan.to_json(REPRO),
    log:
        RO / "logs" / "plan.log",
    script:
        "dispatch.py"


rule reproduce_stage:
    input:
        plan=RO / "plan.json",
        check=RO / "package_check.json",
    output:
        directory(RO / "implementation" / "{benchmark}"),
    log:
        RO / "logs" / "stage_{benchmark}.log",
    script:
        "dispatch.py"


rule reproduce_image:
    # a container engine only: the image the package's code runs in, from the staged copy's Dockerfile
    input:
        plan=RO / "plan.json",
        stage=RO / "implementation" / "{benchmark}",
    output:
        RO / "containers" / "{benchmark}.json",
    params:
        engine=config["engine"],
        socket=config.get("engine_socket") or None,
        build_args=config.get("build_args") or {},
        tag_prefix=config["image_tag_prefix"],
        # the package's Dockerfile builds without network and pulls no base image unless the user allows it
        network=bool(config["reproduce_build_network"]),
    log:
        RO / "logs" / "image_{benchmark}.log",  # the build's output
    script:
        "dispatch.py"


rule reproduce_data:
    # the package's own data generator (its staged copy first on the path), in its image or natively
    input:
        stage=RO / "implementation" / "{benchmark}",
        image=_image,
    output:
        PLAN.dataset_ready("{benchmark}"),
    params:
        folder=lambda w: RO / "data" / w.benchmark,
        data=lambda w: {"data": REPRO.benchmarks[w.benchmark].params["data"]},
        seed=lambda w: REPRO.benchmarks[w.benchmark].data_seed,
    log:
        RO / "logs" / "data_{benchmark}.log",
    script:
        "dispatch.py"


include: "runs.smk"
include: "compliance.smk"


rule reproduce_report:
    # its log (the verdict's line) goes to the terminal too (mlrepro/jobs.py: SHOWN)
    input:
        PLAN.all_runs(PLAN.out.summary),
        PLAN.all_runs(PLAN.out.verdict),
        [PLAN.dataset_ready(b) for b, p in REPRO.benchmarks.items() if p.data_dir is None],
        _RESULT_FILES,
        plan=RO / "plan.json",
        check=RO / "package_check.json",
    output:
        json=RO / "reproduction.json",
        html=RO / "reproduction.html",
    params:
        ruleset=config["ruleset"],
        reproduced=RO,
        # reproduce_tolerance: the time to train's, a fraction (none: MLCommons' 2.5% imaging, 5% others)
        tolerance=float(config["reproduce_tolerance"]) if config.get("reproduce_tolerance") is not None else None,
    log:
        RO / "logs" / "report.log",
    script:
        "dispatch.py"
