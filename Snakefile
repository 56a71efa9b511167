# mlrepro: MLPerf Training as one DAG.
#   environment -> data -> runs (+ telemetry) -> compliance -> package -> score -> report
# `snakemake --cores all` runs the embedded default; `--config audit=PATH ruleset=X` audits a package;
# `--config audit=PATH usage=inference` audits a published inference round.
# `--config reproduce=ORG_DIR system=S only=[bm] runs=K` re-runs a package's results and compares.
from pathlib import Path

from snakemake.exceptions import WorkflowError

from mlrepro.core import config as mlconfig
from mlrepro.datasets import recipe as dataset_recipe

configfile: Path(workflow.basedir) / "config" / "config.yaml"

try:
    # benchmarks.<bm>.data: generated (the generator's block), recipe, {recipe: FILE} or {path: DIR}
    config, DATA_CHOICES = dataset_recipe.split_choices(config)
    config, BENCHMARKS = mlconfig.load(config, source="config/config.yaml and --config", base_dir=Path.cwd())
except (mlconfig.ConfigError, dataset_recipe.RecipeError) as error:
    raise WorkflowError(str(error)) from None


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
    include: "rules/integrity.smk"

    rule all:
        input:
            REPORT,
            lambda w: INFERENCE_TARGETS,  # rules/inference.smk; empty when inference.benchmarks is


    include: "rules/containers.smk"
    include: "rules/environment.smk"
    include: "rules/data.smk"
    include: "rules/runs.smk"
    include: "rules/compliance.smk"
    include: "rules/package.smk"
    include: "rules/score.smk"
    include: "rules/report.smk"
    include: "rules/inference.smk"

    # On a cluster (profiles/slurm) these run on the submit host: seconds of work each, or (images) a
    # build through the host's engine socket; runs and data generation are cluster jobs.
    localrules:
        all,
        compliance,
        package,
        score,
        report,
        container_image,
        image_bundle,
