"""What runs: pure data from the config and the rulesets, before any config file is captured.

The units (each (system, benchmark)), their runs and seeds, every output path (mlrepro/core/outputs.py), the images,
the datasets, the judging release and the served models. Building it reads the config, the rulesets and the
implementation folders' names; no capture record, no file written, no process started. How a unit launches is
mlrepro/planning/launches.py's (from its capture: mlrepro/planning/captures.py); what Snakemake tracks to re-run a job
is mlrepro/planning/rerun_keys.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mlrepro.config import Benchmark, config_hash, run_seed, submittable
from mlrepro.containers.context import context_files, folder_files
from mlrepro.core import release_table, rulesets, smk
from mlrepro.core.minis import mini_dir
from mlrepro.core.outputs import Outputs, RunGrid
from mlrepro.datasets import recipe as data_recipe
from mlrepro.datasets.manifest import MANIFEST
from mlrepro.inference import rounds
from mlrepro.systems import System

RECIPE_STEPS = ("verify", "extract", "prepare", "path")
Unit = tuple[str, str]  # (system, benchmark): its own runs, job shape, config file and launch file


@dataclass(frozen=True)
class WhatRuns(RunGrid):
    config: dict[str, Any]
    benchmarks: dict[str, Benchmark]
    data_choices: dict[str, data_recipe.Choice]
    systems: dict[str, System]  # in the config's order; one for the shorthand system:
    units: dict[Unit, Benchmark]  # each (system, benchmark), its implementation's config file the system's
    repo: Path  # the workflow's folder (the Snakefile's)
    out: Outputs = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Outputs(Path(self.config["outdir"])))

    # --- the config, as the stages name it
    @cached_property
    def system(self) -> str:
        """The first system (the shorthand's only one): the inference stage's."""
        return next(iter(self.systems))

    @cached_property
    def submittable(self) -> bool:
        return submittable(self.benchmarks)

    @cached_property
    def config_hash(self) -> str:
        return config_hash(self.config)

    @cached_property
    def ordered_benchmarks(self) -> list[str]:
        """The benchmarks in the seed document's order."""
        order = {b: i for i, b in enumerate(rulesets.SEED_ORDER)}
        return sorted(self.benchmarks, key=lambda b: order.get(b, len(order)))

    @cached_property
    def mini_benchmarks(self) -> list[str]:
        return [b for b in self.ordered_benchmarks if self.benchmarks[b].mini]

    def run_indices(self, benchmark: str) -> range:
        """Every launched run: runs_to_run (M) of them, of which the package keeps the median window of runs (N)."""
        spec = self.benchmarks[benchmark]
        return range(spec.runs_to_run or spec.runs)

    @cached_property
    def ordered_units(self) -> list[Unit]:
        """Every (system, benchmark): systems in the config's order, benchmarks in the seed document's."""
        return [(s, b) for s in self.systems for b in self.ordered_benchmarks if (s, b) in self.units]

    @cached_property
    def result_files(self) -> dict[str, dict[str, list[str]]]:
        """Every run's result file: {system: {benchmark: [result files in run order]}}."""
        return {s: {b: [str(self.out.result(s, b, i)) for i in self.run_indices(b)]
                    for s2, b in self.ordered_units if s2 == s} for s in self.systems}

    @cached_property
    def kept_runs(self) -> dict[str, int]:
        """The runs each benchmark's package keeps and its score counts: of more launched, the median window."""
        return {b: spec.runs for b, spec in self.benchmarks.items()}

    @property
    def system_pattern(self) -> str:
        """The ``system`` wildcard's constraint: exactly the plan's system names."""
        return smk.one_of(re.escape(s) for s in self.systems)

    def run_seed(self, benchmark: str, run: int) -> int:
        return run_seed(self.config["seed"], benchmark, run)

    def submission(self, system: str) -> dict[str, Any]:
        return {"org": self.config["org"], "platform": system, "division": self.config["division"],
                "status": self.config["status"]}

    def trace_node(self, system: str) -> dict[str, Any]:
        """How the preview's stand-ins describe a node of ``system`` (mlrepro.slurm.trace.Node.of's arguments)."""
        s = self.systems[system]
        return {"description": s.description, "platform": s.platform}

    @cached_property
    def telemetry_hz(self) -> float:
        telemetry = self.config["telemetry"]
        return telemetry["hz"] if telemetry["enabled"] else 0

    # --- images
    @property
    def native(self) -> bool:
        return self.config["engine"] == "native"

    @cached_property
    def images(self) -> list[str]:
        """The images to build: every unit's, but those of folders that name a ready one (benchmarks.<bm>.image)."""
        return sorted({u.image for u in self.units.values() if u.implementation.container is None})

    @cached_property
    def image_records(self) -> list[Path]:
        """Every image's build record; none for native runs."""
        return [] if self.native else [self.out.image_record(i) for i in self.images]

    def image_record(self, benchmark: str, system: str | None = None) -> list[Path]:
        """The build record of the image a benchmark runs in (the system's folder's); none for native runs or a
        ready image."""
        unit = self.units[(system, benchmark)] if system else self.benchmarks[benchmark]
        if self.native or unit.implementation.container is not None:
            return []
        return [self.out.image_record(unit.image)]

    @cached_property
    def images_lock(self) -> Path:
        # the lock sits with the outputs unless the config names one (e.g. a committed images.lock.json)
        return Path(self.config.get("images_lock") or self.out.default_images_lock)

    def image_folder(self, image: str) -> Path | None:
        """An implementation folder's image is built from its own Dockerfile with the folder as context;
        ours (None) from containers/<image>/ with this repository as context."""
        return next((b.implementation.folder for b in self.units.values() if not b.mini and b.image == image), None)

    def image_platform(self, image: str) -> str | None:
        """The platform an image is built for: that of the systems that run it (systems.<name>.platform)."""
        return next((self.systems[s].platform for (s, _), u in self.units.items() if u.image == image), None)

    def container_inputs(self, image: str) -> list[Path]:
        """Build mode: the files the image is built from (a changed Dockerfile or source rebuilds it).
        Locked mode: the lock file only (nothing is built)."""
        if self.config["images"] == "locked":
            return [self.images_lock]
        if folder := self.image_folder(image):
            return [folder / p for p in folder_files(folder)]
        return [self.repo / p for p in context_files(image, self.repo)]

    @cached_property
    def engine_socket(self) -> str | None:
        return self.config.get("engine_socket") or None

    # --- the release that judges the ruleset
    @cached_property
    def logging_release(self) -> str | None:
        """The folder of the mlperf-logging release that judges the ruleset (logging_release); None: the installed
        one."""
        folder = rulesets.release_folder(self.config.get("logging_release"), self.config["ruleset"],
                                         self.config["usage"])
        return str(folder) if folder else None

    @cached_property
    def release_stamps(self) -> list[str]:
        """What the steps judged by that release wait for: its install job's stamp where it is the table's release
        in the user's cache (rules/release.smk), else nothing."""
        return release_table.stamps(Path(self.logging_release) if self.logging_release else None)

    # --- datasets
    def data_choice(self, benchmark: str) -> data_recipe.Choice:
        return self.data_choices.get(benchmark, data_recipe.Choice("generated"))

    @cached_property
    def data_root(self) -> Path:
        return Path(self.config["data_root"]) if self.config["data_root"] else self.out.default_data_root

    def recipe_file(self, benchmark: str) -> Path:
        choice = self.data_choice(benchmark)
        return choice.path if choice.path else mini_dir(benchmark) / data_recipe.RECIPE

    def dataset_dir(self, benchmark: str) -> Path:
        """The folder the benchmark's runs read (mounted read-only into containers)."""
        choice = self.data_choice(benchmark)
        if choice.kind == "recipe":
            return self.data_root / benchmark / "prepared"
        if choice.kind == "path" and choice.path is not None:
            return choice.path
        return self.out.generated_data(benchmark)

    def generated_manifest(self, benchmark: str) -> Path:
        return self.out.generated_data(benchmark) / MANIFEST

    def dataset_ready(self, benchmark: str) -> Path:
        """The file that exists once the benchmark's dataset is ready (the runs' input)."""
        kind = self.data_choice(benchmark).kind
        if kind == "recipe":
            return self.out.receipt(benchmark, "prepare")
        if kind == "path":
            return self.out.receipt(benchmark, "path")
        return self.generated_manifest(benchmark)

    def prepare_image(self, benchmark: str) -> list[Path]:
        """With a container engine, a recipe whose implementation brings prepare scripts runs them in its image."""
        recipe = data_recipe.load(benchmark, self.recipe_file(benchmark))
        if self.native or not recipe.prepare.get("image"):
            return []
        return self.image_record(benchmark)

    def dataset_receipts(self, benchmark: str) -> list[Path]:
        if self.data_choice(benchmark).kind == "generated":
            return [self.out.generated_receipt(benchmark)]
        return [self.out.receipt(benchmark, step) for step in RECIPE_STEPS]

    def data_resources(self, step: str) -> dict[str, Any]:
        """A data step's Slurm resources (slurm.data_steps.<step>: runtime, mem_mb, cpus_per_task, partition,
        extra); left out: the profile's defaults. BERT's preparation needs hours and hundreds of GB."""
        return dict((self.config["slurm"].get("data_steps") or {}).get(step) or {})

    # --- inference (opt-in: inference.benchmarks)
    @cached_property
    def inference_benchmarks(self) -> list[str]:
        """Served: our own models only (a vendor implementation's checkpoint is not ours to load)."""
        return [b for b in self.config["inference"]["benchmarks"] if b in self.benchmarks and self.benchmarks[b].mini]

    def inference_runs(self, benchmark: str) -> list[Path]:
        """The training runs a served model comes from: those of the first system that trains it."""
        system = next(s for s, b in self.ordered_units if b == benchmark)
        return [self.out.summary(system, benchmark, i) for i in self.run_indices(benchmark)]

    @cached_property
    def inference_scenarios(self) -> dict[str, list[str]]:
        """benchmark -> the scenarios it is served in: inference.scenarios as the declared round requires them of
        each model for the system type they make (mlrepro/inference/rounds.py)."""
        inf = self.config["inference"]
        return rounds.get(inf["round"]).served_scenarios(self.inference_benchmarks, inf["scenarios"])

    @cached_property
    def inference_targets(self) -> list[Path]:
        return [self.out.inference_report] if self.inference_benchmarks else []
