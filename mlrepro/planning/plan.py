"""The training pipeline's plan: what the rule files read as ``PLAN``, built once and read-only.

The Snakefile builds one :class:`Plan` (``mlrepro.planning.start``). It is what runs (:class:`WhatRuns`: units, runs,
paths, images, datasets; mlrepro/planning/what_runs.py) with the parts that decide the rest, each of its own module:

- ``captures``: each unit's config file as its capture record gives it (mlrepro/planning/captures.py);
- ``launches``: how a unit launches: shape, GPUs, allocation, launch spec (mlrepro/planning/launches.py);
- ``specs``: what each stage's job acts on (mlrepro/planning/specs.py);
- ``rerun``: Snakemake's rerun keys, what the rules track (mlrepro/planning/rerun_keys.py).

The names below are those the run stage's rules read of a ``PLAN`` (rules/runs.smk, rules/compliance.smk; a
reproduction's ``PLAN`` gives the same: mlrepro/reproduce/run_stage.py) and those the other stages' rules read, each
handed to the part that decides it. Building it reads the config, the implementation folders and the capture records
already written; it writes nothing and starts nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.planning.captures import Captures, StandInCaptures
from mlrepro.planning.launches import Launches
from mlrepro.planning.rerun_keys import RerunKeys
from mlrepro.planning.specs import Specs
from mlrepro.planning.what_runs import Unit, WhatRuns
from mlrepro.runs.implementation import Captured
from mlrepro.slurm import node_env
from mlrepro.slurm.resources import JobShape

__all__ = ["Plan", "Unit"]


@dataclass(frozen=True)
class Plan(WhatRuns):
    stand_in: bool = False  # every config file captured as exporting nothing (RerunKeys.basis)
    captures: Captures = field(init=False, compare=False, repr=False)
    launches: Launches = field(init=False, compare=False, repr=False)
    specs: Specs = field(init=False, compare=False, repr=False)
    rerun: RerunKeys = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        captures = (StandInCaptures if self.stand_in else Captures)(self)
        launches = Launches(self, captures)
        object.__setattr__(self, "captures", captures)
        object.__setattr__(self, "launches", launches)
        object.__setattr__(self, "specs", Specs(self, captures, launches))
        object.__setattr__(self, "rerun", RerunKeys(self, captures, lambda: dataclasses.replace(self, stand_in=True)))

    # --- captures (rules/runs.smk ``capture``; every job that reads a record takes it as an input)
    def captured(self, system: str, benchmark: str) -> Captured:
        return self.captures.captured(system, benchmark)

    def capture_file(self, system: str, benchmark: str) -> Path:
        return self.captures.file(system, benchmark)

    @property
    def capture_files(self) -> list[Path]:
        return self.captures.files

    @property
    def capture_pattern(self) -> str:
        return self.captures.pattern

    def capture_inputs(self, key: str) -> dict[str, Any]:
        """The capture job's inputs: none, it sources the folder's config file in place (a reproduction's sources a
        staged copy, mlrepro/reproduce/run_stage.py)."""
        return {}

    def capture_source(self, key: str) -> Path:
        return self.captures.source(key)

    def capture_checks(self, key: str) -> list[dict[str, Any]]:
        return self.captures.checks(key)

    def capture_runs(self, key: str) -> list[dict[str, Any]]:
        return self.captures.run_subs(key)

    def capture_preflight(self, key: str) -> dict[str, Any]:
        return self.launches.preflight(key)

    # --- launches (rules/runs.smk ``launch`` and ``run``, rules/preview.smk, rules/containers.smk, the hooks)
    def launch_params(self, system: str, benchmark: str) -> dict[str, Any]:
        return self.launches.params(system, benchmark)

    def scheduled_gpus(self, system: str, benchmark: str) -> int:
        return self.launches.scheduled_gpus(system, benchmark)

    @property
    def local_gpus(self) -> int:
        return self.launches.local_gpus

    def run_resources(self) -> dict[str, Any]:
        return self.launches.resources()

    @property
    def run_shapes(self) -> dict[str, JobShape]:
        return self.launches.known_shapes

    @property
    def node_environments(self) -> dict[str, node_env.NodeEnv]:
        return self.launches.node_environments

    def preview_units(self) -> list[dict[str, Any]]:
        return self.launches.preview_units()

    def sqsh_record(self, system: str, benchmark: str) -> list[str]:
        return self.launches.sqsh_record(system, benchmark)

    def sqsh_job(self, system: str, name: str) -> dict[str, Any]:
        return self.launches.sqsh_job(system, name)

    @property
    def sqsh_names(self) -> str:
        return self.launches.sqsh_names

    # --- specs (each stage's rule's params)
    @property
    def environment_spec(self) -> dict[str, Any]:
        return self.specs.environment_spec

    def data_spec(self, benchmark: str) -> dict[str, Any]:
        return self.specs.data_spec(benchmark)

    def inference_spec(self, benchmark: str) -> dict[str, Any]:
        return self.specs.inference_spec(benchmark)

    def package_spec(self) -> dict[str, Any]:
        return self.specs.package_spec()

    def report_spec(self) -> dict[str, Any]:
        return self.specs.report_spec()
