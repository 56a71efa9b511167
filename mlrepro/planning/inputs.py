"""Input functions of the rules whose inputs depend on the wildcards and on the preparation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlrepro.core import smk
from mlrepro.planning.plan import Plan
from mlrepro.planning.prepare import Preparation


def run_inputs(plan: Plan, prepare: Preparation) -> Callable[[Any], dict[str, Any]]:
    """The run rule's inputs: its image record and its dataset; ``prepared`` (no file) runs the checks while the
    DAG is built. The rule adds its config file's capture record (rules/runs.smk). Not the launch file: a job that
    wrote it would run whenever a pipeline key changed, and Snakemake (9.14 to 9.27: update_needrun) does not check
    the jobs downstream of a job that runs for reasons of their own (their params), so that a changed hyperparameter
    would not show in a dry run; each run is given its launch spec in its params instead, where it is not tracked."""

    def inputs(wildcards: Any) -> dict[str, Any]:
        benchmark = wildcards.benchmark
        found: dict[str, Any] = {"prepared": prepare(wildcards),
                                 "image": plan.image_record(benchmark, wildcards.system),  # the system's folder's
                                 "sqsh": plan.sqsh_record(wildcards.system, benchmark)}  # a registry image's import
        if plan.benchmarks[benchmark].mini:  # ours: its data choice (rules/data.smk); a vendor's: data_dir
            found["manifest"] = plan.dataset_ready(benchmark)
        return found

    return smk.signature_once(inputs)


def capture_record(plan: Plan, flag: Callable[[str], Any]) -> Callable[[Any], Any]:
    """The input function of the jobs that read a (system, benchmark)'s capture record: the record, flagged by ``flag``
    (the Snakefile's ``ancient``). Their params and resources read it: ``<TBD>`` while the DAG is built until the
    capture job has run, asked again before they run."""

    def record(wildcards: Any) -> Any:
        return flag(str(plan.capture_file(wildcards.system, wildcards.benchmark)))

    return smk.signature_once(record)
