"""Each stage's spec: what its job acts on, given in its rule's params as JSON gives them back.

The environment's, a dataset's and a served model's come from the config alone. The package's and the report's
describe each system's implementations, read from the capture records (FileNotFoundError until they are written):
they travel in untracked params beside their tracked basis (mlrepro/planning/rerun_keys.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from mlrepro.containers.context import base_images
from mlrepro.datasets.manifest import MANIFEST
from mlrepro.planning.captures import Captures
from mlrepro.planning.launches import Launches
from mlrepro.planning.what_runs import WhatRuns
from mlrepro.runs.implementation import describe as describe_implementation


def canonical(value: Any) -> Any:
    """``value`` as JSON gives it back, keys sorted: the same repr for the same content (Snakemake's params
    trigger compares reprs), and what the job receives (mlrepro/core/job.py)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


@dataclass(frozen=True)
class Specs:
    runs: WhatRuns
    captures: Captures
    launches: Launches

    @cached_property
    def environment_spec(self) -> dict[str, Any]:
        c = self.runs.config
        spec = {"org": c["org"], "system": c["system"], "division": c["division"], "status": c["status"],
                "threads": c["threads_per_run"], "device": c["device"]}
        if not all(u.mini for u in self.runs.units.values()):  # the note on our mini workloads is not a vendor's
            spec["mini"] = False
            spec["frameworks"] = self.frameworks
        return canonical(spec)

    def data_spec(self, benchmark: str) -> dict[str, Any]:
        """A mini benchmark's generator block (its dataset's hyperparameters)."""
        return canonical(self.runs.benchmarks[benchmark].data_params)

    def inference_spec(self, benchmark: str) -> dict[str, Any]:
        """A served benchmark's config (the model it loads)."""
        return canonical(self.runs.benchmarks[benchmark].params)

    @cached_property
    def frameworks(self) -> dict[str, str]:
        """Each vendor benchmark's framework, from its image: the ready image's reference, else its Dockerfile's
        base (nvcr.io/nvidia/pytorch:24.09-py3 -> "pytorch 24.09-py3 (nvcr.io/nvidia/pytorch:24.09-py3)")."""
        found: dict[str, str] = {}
        for (_, b), unit in self.runs.units.items():
            impl = unit.implementation
            if unit.mini or b in found:
                continue
            refs = [impl.container] if impl.container else base_images(
                impl.folder / "Dockerfile", {k: str(v) for k, v in self.runs.config["build_args"].items()})
            if refs:
                name, _, tag = refs[-1].rsplit("/", 1)[-1].partition(":")
                found[b] = f"{name} {tag or 'latest'} ({refs[-1]})"
        return found

    def package_spec(self) -> dict[str, Any]:
        runs, c = self.runs, self.runs.config
        return canonical({
            "org": c["org"], "usage": c["usage"], "ruleset": c["ruleset"], "submittable": runs.submittable,
            # each system's description: the probed host's, with its node count and the fields set by hand
            "systems": {s: {"nodes": self.launches.system_nodes(s), "description": runs.systems[s].description}
                        for s in runs.systems},
            "runs": runs.result_files,
            "keep": runs.kept_runs,
            "implementations": {b: {
                "kind": spec.implementation.kind, "name": spec.implementation.name,
                "folder": str(spec.implementation.folder), "image": spec.image,
                "config_file": spec.implementation.config_file.name,
                # none for native runs or a ready image (CONT as it is: nothing was built)
                "image_record": next((str(r) for r in runs.image_record(b)), None),
            } for b, spec in runs.benchmarks.items()},
            "provenance": {"outdir": str(runs.out.root), "config": c, "config_hash": runs.config_hash,
                           "repo": str(runs.repo),  # the Snakefile's checkout, whose git state is recorded
                           "data_manifests": {b: str(runs.dataset_dir(b) / MANIFEST) for b in runs.benchmarks
                                              if runs.benchmarks[b].mini}},
        })

    def report_spec(self) -> dict[str, Any]:
        runs = self.runs
        return canonical({
            "config": runs.config, "config_hash": runs.config_hash, "submittable": runs.submittable,
            "benchmarks": {b: {"params": spec.params, "runs": spec.runs, "runs_to_run": len(runs.run_indices(b)),
                               "required_runs": spec.required_runs}
                           for b in runs.ordered_benchmarks for spec in [runs.benchmarks[b]]},
            "systems": {s: {"nodes": self.launches.system_nodes(s), "implementations": {
                b: describe_implementation(runs.units[(s2, b)].implementation, self.captures.captured(s2, b))
                for s2, b in runs.ordered_units if s2 == s}} for s in runs.systems}})
