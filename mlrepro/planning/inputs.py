"""Input functions of the rules whose inputs depend on the wildcards and on the preparation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from snakemake.io import ancient

from mlrepro.planning.plan import Plan
from mlrepro.planning.prepare import Preparation


def run_inputs(plan: Plan, prepare: Preparation) -> Callable[[Any], dict[str, Any]]:
    """The run rule's inputs: the launch file as an ``ancient`` input (a rewritten launch, pipeline keys only,
    keeps finished runs; what a run computes from is in its params), its image record, its dataset."""

    def inputs(wildcards: Any) -> dict[str, Any]:
        benchmark = wildcards.benchmark
        found: dict[str, Any] = {"prepared": prepare(wildcards), "launch": ancient(plan.out.launch(benchmark)),
                                 "image": plan.image_record(benchmark)}
        if plan.benchmarks[benchmark].mini:  # ours: its data choice (rules/data.smk); a vendor's: data_dir
            found["manifest"] = plan.dataset_ready(benchmark)
        return found

    return inputs
