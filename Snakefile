# mlrepro: MLPerf Training as one DAG.
#   environment -> data -> runs (+ telemetry) -> compliance -> package -> score -> report
# `snakemake --cores all` runs the embedded default; `--config audit=PATH ruleset=X` audits a package.
from pathlib import Path

from snakemake.exceptions import WorkflowError

from mlrepro import config as mlconfig

configfile: Path(workflow.basedir) / "config" / "config.yaml"

try:
    config, BENCHMARKS = mlconfig.load(config, source="config/config.yaml and --config")
except mlconfig.ConfigError as error:
    raise WorkflowError(str(error)) from None


if config.get("audit"):

    include: "rules/audit.smk"

    # An included file cannot set the default target: name it here.
    rule audit:
        default_target: True
        input:
            rules.audit_all.input,

else:

    include: "rules/common.smk"
    include: "rules/integrity.smk"

    rule all:
        input:
            REPORT,


    include: "rules/containers.smk"
    include: "rules/environment.smk"
    include: "rules/data.smk"
    include: "rules/runs.smk"
    include: "rules/compliance.smk"
    include: "rules/package.smk"
    include: "rules/score.smk"
    include: "rules/report.smk"
