"""Input functions of the rules whose inputs depend on the wildcards and on the preparation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlrepro.core import smk
from mlrepro.planning.plan import Plan
from mlrepro.planning.prepare import Preparation


def run_inputs(plan: Plan, prepare: Preparation) -> Callable[[Any], dict[str, Any]]:
    """The run rule's inputs: its image record and its dataset; ``prepared`` (no file) runs the checks while the
    DAG is built. Not the launch file: PREPARE writes it from onstart, before any job (a rewritten launch, pipeline
    keys only, keeps finished runs; what a run computes from is in the run's params). As an ``ancient`` input it
    would hide the runs from Snakemake 9.27's needrun check whenever it is rewritten (update_needrun masks every
    job downstream of a job that runs, and the ancient input then stops the walk that should reach them), so that
    a changed hyperparameter would not re-run its runs."""

    def inputs(wildcards: Any) -> dict[str, Any]:
        benchmark = wildcards.benchmark
        found: dict[str, Any] = {"prepared": prepare(wildcards),
                                 "image": plan.image_record(benchmark, wildcards.system)}  # the system's folder's
        if plan.benchmarks[benchmark].mini:  # ours: its data choice (rules/data.smk); a vendor's: data_dir
            found["manifest"] = plan.dataset_ready(benchmark)
        return found

    return smk.signature_once(inputs)
