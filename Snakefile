# mlrepro: MLPerf Training as one DAG.
#   environment -> data -> runs (+ telemetry) -> compliance -> package -> score -> report
# `snakemake --cores all` runs the embedded default; `--config audit=PATH ruleset=X` audits a package;
# `--config audit=PATH usage=inference` audits a published inference round.
# `--config reproduce=ORG_DIR system=S only=[bm] runs=K` re-runs a package's results and compares.
from pathlib import Path

from mlrepro import planning

configfile: Path(workflow.basedir) / "config" / "config.yaml"

# The one planning step: the validated config with its defaults, every output path, every spec (PLAN, read by
# each rules file); PREPARE checks results and datasets while the DAG is built (it only reads, and refuses what
# must be fixed first) and takes the lock from onstart (mlrepro/planning/).
PLAN, PREPARE = planning.start(workflow, config)
config = PLAN.config


if config.get("audit") and config["usage"] == "inference":

    include: "rules/inference_audit.smk"

    rule audit:
        default_target: True
        input:
            rules.inference_audit_all.input,

elif config.get("audit"):

    include: "rules/audit.smk"

    # An included file cannot set the default target: name it here.
    rule audit:
        default_target: True
        input:
            rules.audit_all.input,

elif config.get("reproduce"):

    include: "rules/reproduce.smk"

    rule reproduce:
        default_target: True
        input:
            rules.reproduce_all.input,

else:

    include: "rules/common.smk"
    include: "rules/inference_vendor.smk"  # before `all`, which names its targets (VENDOR_TARGETS)

    rule all:
        input:
            PREPARE.again,  # checks before the DAG looks at any file; names removed files to make again
            PLAN.out.report,
            PLAN.launch_files,  # each (system, benchmark)'s launch file (rules/runs.smk)
            PLAN.inference_targets,  # empty unless inference.benchmarks names one
            VENDOR_TARGETS,  # empty unless inference.vendor names a vendor's code folder
        default_target: True

    include: "rules/containers.smk"
    include: "rules/environment.smk"
    include: "rules/data.smk"
    include: "rules/runs.smk"
    include: "rules/compliance.smk"
    include: "rules/package.smk"
    include: "rules/score.smk"
    include: "rules/report.smk"
    include: "rules/inference_audit_tests.smk"
    include: "rules/inference.smk"
    include: "rules/preview.smk"

    # On a cluster (profiles/slurm) these run on the submit host: seconds of work each, or (images) a
    # build through the host's engine socket; runs and data generation are cluster jobs.
    localrules:
        all,
        repair,
        compliance,
        package,
        score,
        report,
        container_image,
        image_bundle,
