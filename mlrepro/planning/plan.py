"""The training pipeline's plan: what the rule files ask of the config, built once and read-only.

The Snakefile builds one :class:`Plan` (``mlrepro.planning.start``) and every rule file reads it as ``PLAN``:
output paths (``PLAN.out``, mlrepro/core/outputs.py), the benchmarks in seed-document order, each dataset's
folder, each stage's spec (what a job is asked to act on: its rule's params) and each benchmark's launch spec.
Building it reads the config and the implementation folders only.

What a config file exports comes from its capture record (mlrepro/runs/capture.py), which a job writes
(rules/runs.smk ``capture``): whatever is derived from it (job shapes, GPUs, the launch spec, the package and report
specs) raises FileNotFoundError, naming the record, until that job has run. The rules ask for these values through
functions of jobs that take the record as an input: while the DAG is built Snakemake shows such a value as ``<TBD>``
and asks again once the record exists, before the job runs. Never in a param Snakemake tracks: it records a tracked
param as it was while the DAG was built, ``<TBD>``, for a job it has records of (9.14 to 9.27: Persistence._params is
cached per job), and would run the job again at the next invocation. What the rules track is known while the DAG is
built: the record's name (what it captured: the launch digest) and each spec as it would be for a stand-in record
(:meth:`Plan.basis`); the record itself is an input.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from mlrepro.config import Benchmark, config_hash, run_seed, submittable
from mlrepro.containers import sqsh
from mlrepro.containers.context import base_images, context_digest, context_files, folder_files
from mlrepro.core import release_table, rulesets
from mlrepro.core.outputs import Outputs
from mlrepro.core.workflows import workflow_dir
from mlrepro.datasets import recipe as data_recipe
from mlrepro.datasets.manifest import MANIFEST
from mlrepro.datasets.vendor_fills import recipe_fills
from mlrepro.inference import rounds
from mlrepro.runs import capture, runsub
from mlrepro.runs.accelerators import machine_gpus
from mlrepro.runs.implementation import Captured, captured, unit_problems
from mlrepro.runs.implementation import describe as describe_implementation
from mlrepro.runs.launch_spec import LaunchSpec
from mlrepro.slurm import node_env
from mlrepro.slurm.resources import JobShape, run_resources, run_sub_resources, shape_for, unit_shape
from mlrepro.systems import System, run_sub_env

RECIPE_STEPS = ("verify", "extract", "prepare", "path")
T = TypeVar("T")
Unit = tuple[str, str]  # (system, benchmark): its own runs, job shape, config file and launch file


@dataclass(frozen=True)
class Plan:
    config: dict[str, Any]
    benchmarks: dict[str, Benchmark]
    data_choices: dict[str, data_recipe.Choice]
    systems: dict[str, System]  # in the config's order; one for the shorthand system:
    units: dict[Unit, Benchmark]  # each (system, benchmark), its implementation's config file the system's
    repo: Path  # the workflow's folder (the Snakefile's)
    out: Outputs = field(init=False)
    # each folder's content (once, for every key and digest of its units), each unit's launch digest, shape, record
    _folders: dict[Path, str] = field(init=False, default_factory=dict, compare=False, repr=False)
    _digests: dict[Unit | Path, str] = field(init=False, default_factory=dict, compare=False, repr=False)
    _shapes: dict[Unit, JobShape] = field(init=False, default_factory=dict, compare=False, repr=False)
    _shape_parts: dict[Unit, Any] = field(init=False, default_factory=dict, compare=False, repr=False)
    _captured: dict[Unit, Captured] = field(init=False, default_factory=dict, compare=False, repr=False)
    _launches: dict[Unit, dict[str, Any]] = field(init=False, default_factory=dict, compare=False, repr=False)

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

    def all_runs(self, path: Callable[[str, str, int], T]) -> list[T]:
        """``path(system, benchmark, run)`` (a path, or any value) for every run of the config."""
        return [path(s, b, i) for s, b in self.ordered_units for i in self.run_indices(b)]

    @property
    def system_pattern(self) -> str:
        """The ``system`` wildcard's constraint: exactly the plan's system names."""
        return "|".join(re.escape(s) for s in self.systems) or "none"

    @property
    def run_shapes(self) -> dict[str, JobShape]:
        """Each (system, benchmark)'s job shape known now (configured, or its config file captured) as
        ``<system>/<benchmark>``: what Slurm's preflight checks before the first job."""
        known = {}
        for s, b in self.ordered_units:
            try:
                known[f"{s}/{b}"] = self.run_shape(s, b)
            except FileNotFoundError:
                continue  # captured by its job before any run of it is submitted
        return known

    def system_nodes(self, system: str) -> int:
        """The system description's number_of_nodes: the system's, else its largest run's."""
        nodes = self.systems[system].nodes
        return nodes or max((self.run_shape(s, b).nodes for s, b in self.ordered_units if s == system), default=1)

    @cached_property
    def images(self) -> list[str]:
        """The images to build: every unit's, but those of folders that name a ready one (benchmarks.<bm>.image)."""
        return sorted({u.image for u in self.units.values() if u.implementation.container is None})

    @property
    def native(self) -> bool:
        return self.config["engine"] == "native"

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
    def image_imports(self) -> dict[Unit, sqsh.Import]:
        """Engine enroot: each (system, benchmark) whose run.sub is given a registry image (benchmarks.<bm>.image),
        with its system's import of it into a .sqsh (mlrepro.containers.sqsh), once per system and reference."""
        if self.config["engine"] != "enroot":
            return {}
        return {unit: sqsh.planned(self.out.root, unit[0], str(impl.container), self.systems[unit[0]].platform)
                for unit, b in self.units.items() if (impl := b.implementation).run_sub is not None
                and impl.container is not None and sqsh.is_registry_ref(impl.container)}

    def image_import(self, system: str, benchmark: str) -> dict[str, Any] | None:
        """What the launch preview shows of a unit's image import (mlrepro.containers.sqsh.describe: the step's argv,
        the .sqsh, where it runs, its size once imported); None where its run.sub is given the image as it is."""
        job = self.image_imports.get((system, benchmark))
        return sqsh.describe(job) if job else None

    @cached_property
    def node_environments(self) -> dict[str, node_env.NodeEnv]:
        """Each system's Python on its nodes (mlrepro.slurm.node_env): the venv of its architecture (platform);
        NodeEnvError naming the system where its nodes cannot run the checkout's venv and slurm.node_venvs is unset."""
        found = {}
        for name, system in self.systems.items():
            try:
                found[name] = node_env.for_system(system.platform, self.config["slurm"].get("node_venvs"),
                                                  self.repo / ".venv")
            except node_env.NodeEnvError as e:
                raise node_env.NodeEnvError(f"systems.{name}: {e}") from None
        return found

    def cluster_preview(self, system: str, benchmark: str) -> dict[str, Any]:
        """For the launch preview's entry of a unit: ``image_import`` (:meth:`image_import`: the import step, its file
        and size, or None) and ``node_environment`` (the venv its nodes' processes run from, or ``error``)."""
        try:
            node = node_env.describe(self.node_environments[system])
        except node_env.NodeEnvError as e:
            node = {"error": str(e)}
        return {"image_import": self.image_import(system, benchmark), "node_environment": node}

    def sqsh_record(self, system: str, benchmark: str) -> list[str]:
        """The run's input: the import record of its system's .sqsh (none where there is no import)."""
        job = self.image_imports.get((system, benchmark))
        return [job.record] if job else []

    def sqsh_job(self, system: str, name: str) -> dict[str, Any]:
        """The sqsh_import job of ``<outdir>/sqsh/<system>/<name>``: its Import, as a JSON object."""
        return next(dataclasses.asdict(j) for j in self.image_imports.values()
                    if j.system == system and Path(j.sqsh).name == name)

    @property
    def sqsh_names(self) -> str:
        """The ``sqsh`` wildcard's constraint: exactly the planned files' names."""
        return "|".join(sorted({re.escape(Path(j.sqsh).name) for j in self.image_imports.values()})) or "none"

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

    def build_context_digest(self, image: str) -> str:
        """The content of the build context, so that an edit rebuilds even where time stamps do not tell."""
        if self.config["images"] == "locked":
            return ""
        if folder := self.image_folder(image):
            return context_digest(image, folder, folder_files(folder))
        return context_digest(image, self.repo)

    @cached_property
    def engine_socket(self) -> str | None:
        return self.config.get("engine_socket") or None

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

    @cached_property
    def telemetry_hz(self) -> float:
        telemetry = self.config["telemetry"]
        return telemetry["hz"] if telemetry["enabled"] else 0

    # --- datasets
    def data_choice(self, benchmark: str) -> data_recipe.Choice:
        return self.data_choices.get(benchmark, data_recipe.Choice("generated"))

    @cached_property
    def data_root(self) -> Path:
        return Path(self.config["data_root"]) if self.config["data_root"] else self.out.default_data_root

    def recipe_file(self, benchmark: str) -> Path:
        choice = self.data_choice(benchmark)
        return choice.path if choice.path else workflow_dir(benchmark) / data_recipe.RECIPE

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

    # --- config files: each captured by a job (rules/runs.smk ``capture``), read here once it has run
    def _folder(self, folder: Path) -> str:
        """A folder's content (mlrepro.runs.capture.folder_digest), hashed once for all its units."""
        if folder not in self._folders:
            self._folders[folder] = capture.folder_digest(folder)
        return self._folders[folder]

    def _record_if_any(self, key: str) -> capture.Record | None:
        path = self.out.capture(key)
        return capture.read(path) if path.is_file() else None

    @cached_property
    def capture_keys(self) -> dict[Unit, str]:
        """Each (system, benchmark)'s capture record, by its name: what capturing its config file reads
        (mlrepro.runs.capture.key). Units with the same config file in folders of the same content share one."""
        return {unit: capture.key(impl.folder, impl.config_file.name, self._folder(impl.folder), self._record_if_any)
                for unit in self.ordered_units for impl in [self.units[unit].implementation]}

    @cached_property
    def _capture_paths(self) -> dict[Unit, Path]:
        return {unit: self.out.capture(key) for unit, key in self.capture_keys.items()}

    def capture_file(self, system: str, benchmark: str) -> Path:
        return self._capture_paths[(system, benchmark)]

    @cached_property
    def capture_files(self) -> list[Path]:
        return sorted(set(self._capture_paths.values()))

    @cached_property
    def launch_files(self) -> list[Path]:
        """Each (system, benchmark)'s launch file (rules/runs.smk ``launch``)."""
        return [self.out.launch(s, b) for s, b in self.ordered_units]

    @property
    def capture_pattern(self) -> str:
        """The ``key`` wildcard's constraint: exactly the plan's record names."""
        return "|".join(sorted(set(self.capture_keys.values()))) or "none"

    def capture_source(self, key: str) -> Path:
        """The config file the record ``key`` captures (of the first unit that reads it)."""
        return next(self.units[u].implementation.config_file for u, k in self.capture_keys.items() if k == key)

    def capture_inputs(self, key: str) -> dict[str, Any]:
        """The capture job's inputs: none, it sources the folder's config file in place (a reproduction's sources a
        staged copy, mlrepro/reproduce/run_stage.py)."""
        return {}

    def _check(self, unit: Unit) -> dict[str, Any]:
        """What mlrepro.runs.implementation.unit_problems checks of a unit besides its config file's variables."""
        system, benchmark = unit
        impl = self.units[unit].implementation
        chosen_by = (f"systems.{system}.config_files.{benchmark}" if self.config.get("systems")
                     else f"benchmarks.{benchmark}.system_config")
        return {"system": system, "benchmark": benchmark, "config_file": str(impl.config_file),
                "folder": str(impl.folder), "kind": impl.kind, "system_nodes": self.systems[system].nodes,
                "given": run_sub_env(self.systems[system], self.units[unit]), "chosen_by": chosen_by}

    def capture_checks(self, key: str) -> list[dict[str, Any]]:
        """The capture job's checks: those of every unit that reads the record ``key``."""
        return [self._check(u) for u, k in self.capture_keys.items() if k == key]

    def capture_runs(self, key: str) -> list[dict[str, Any]]:
        """What the capture job of record ``key`` runs each run.sub with to find what it needs set
        (mlrepro/runs/demands.py, mlrepro.runs.capture_job): per unit with run.sub that reads the record, what a run
        gives it besides the config file's variables, and the node it runs on."""
        runs = []
        for (system, benchmark), k in self.capture_keys.items():
            impl, b = self.units[(system, benchmark)].implementation, self.units[(system, benchmark)]
            if k != key or impl.run_sub is None:
                continue
            runs.append({"system": system, "benchmark": benchmark, "run_sub": str(impl.run_sub),
                         "config_file": str(impl.config_file), "given": run_sub_env(self.systems[system], b),
                         "cont": impl.container or runsub.unbuilt_image(impl.folder),
                         "data_dir": str(b.data_dir), "log_dir": str(self.out.run_dir(system, benchmark, 0).resolve()),
                         "seed": self.run_seed(benchmark, 0), "submission": self.submission(system),
                         "node": self.trace_node(system), "fills": recipe_fills(benchmark)})
        return runs

    def trace_node(self, system: str) -> dict[str, Any]:
        """How the preview's stand-ins describe a node of ``system`` (mlrepro.slurm.trace.Node.of's arguments)."""
        s = self.systems[system]
        return {"description": s.description, "platform": s.platform}

    def capture_problems(self) -> list[str]:
        """What stops the runs of units whose config file is captured (their records read, nothing run): the lines
        of mlrepro.runs.implementation.unit_problems. A record not written yet is checked by the job that writes it."""
        return [line for unit in self.ordered_units if (path := self.capture_file(*unit)).is_file()
                for line in unit_problems(capture.read(path).env, **self._check(unit))]

    def captured(self, system: str, benchmark: str) -> Captured:
        """The unit's config file as its capture record gives it: its variables and job shape. FileNotFoundError
        (the record's path, as the jobs that read it name it in their inputs) where its capture job has not run."""
        unit = (system, benchmark)
        if unit not in self._captured:
            impl = self.units[unit].implementation
            record = capture.read(self.capture_file(system, benchmark))
            # run.sub runs with the config's env over the config file's (runsub.environment): so is its shape
            given = run_sub_env(self.systems[system], self.units[unit]) if impl.run_sub else {}
            self._captured[unit] = captured({**record.env, **given}, impl.config_file, impl.folder, impl.kind)
        return self._captured[unit]

    # --- runs
    @cached_property
    def local_gpus(self) -> int:
        """This machine's GPUs, for Snakemake's local scheduling only (``resources: gpus``; ignored on Slurm, where
        each run's GPUs are its allocation's and the driver finds them there: mlrepro/runs/accelerators.py)."""
        return machine_gpus() if self.config["gpus"] == "auto" else int(self.config["gpus"])

    def run_gpus(self, system: str, benchmark: str) -> int:
        """Accelerators a run holds: nodes x GPUs per node of its config; ours one where it trains on a GPU
        (device cuda; device auto: one if the machine that runs it has one, the driver decides)."""
        b = self.units[(system, benchmark)]
        gpus = self.captured(system, benchmark).gpus
        if gpus == 0 and b.mini and self.config["device"] != "cpu":
            return 1
        return gpus

    def scheduled_gpus(self, system: str, benchmark: str) -> int:
        """What a run holds of Snakemake's local ``gpus`` resource: device auto on a machine without GPUs: none."""
        gpus = self.run_gpus(system, benchmark)
        b = self.units[(system, benchmark)]
        return 0 if b.mini and self.config["device"] == "auto" and not self.local_gpus else gpus

    @property
    def unit_shapes(self) -> dict[Unit, JobShape]:
        """Every (system, benchmark)'s job shape (:meth:`run_shape`); FileNotFoundError while a config file that
        gives one is not captured."""
        return {unit: self.run_shape(*unit) for unit in self.ordered_units}

    def run_shape(self, system: str, benchmark: str) -> JobShape:
        """Nodes, processes per node, GPUs and walltime of a (system, benchmark)'s runs: job_shapes.<benchmark> in
        the config, else its captured config file (DGXNNODES, DGXNGPU, WALLTIME); the system's nodes where it has
        them."""
        unit = (system, benchmark)
        if unit not in self._shapes:
            configured, nodes, sbatch = self._shape_of(unit)
            env = {} if configured else self.captured(system, benchmark).env
            self._shapes[unit] = unit_shape(env, configured, nodes, sbatch)
        return self._shapes[unit]

    def _shape_of(self, unit: Unit) -> tuple[JobShape | None, int | None, tuple[str, ...] | None]:
        """What a unit's shape takes besides its config file: job_shapes.<benchmark>, the system's nodes, and for
        a folder with run.sub the #SBATCH options its allocation keeps (mlrepro.slurm.resources.unit_shape). Once per
        unit: asked for each job while its config file is not captured yet."""
        if unit not in self._shape_parts:
            run_sub = self.units[unit].implementation.run_sub
            self._shape_parts[unit] = (
                shape_for(self.config, unit[1]) if unit[1] in self.config["job_shapes"] else None,
                self.systems[unit[0]].nodes, tuple(runsub.kept_sbatch(run_sub)) if run_sub else None)
        return self._shape_parts[unit]

    def capture_preflight(self, key: str) -> dict[str, Any]:
        """What the capture job of record ``key`` asks Slurm on a cluster, as its first runs' preflight: the shape of
        every unit that reads it, against the partition (mlrepro.slurm.checks; the onstart hook checks the shapes it
        knows then)."""
        slurm = self.config["slurm"]
        units = {f"{s}/{b}": {"configured": dataclasses.asdict(c) if c else None, "nodes": n, "sbatch": sb}
                 for (s, b), k in self.capture_keys.items() if k == key for c, n, sb in [self._shape_of((s, b))]}
        return {"partition": slurm.get("partition"), "threads": self.config["threads_per_run"],
                "engine": self.config["engine"], "units": units}

    def run_resources(self) -> dict[str, Any]:
        """The run rule's Slurm resources (mlrepro.slurm.resources.run_resources) of every unit's shape."""
        return run_resources(self.config, self.config["threads_per_run"], self.ordered_units,
                             lambda unit: self.run_shape(*unit),
                             stand_in=lambda unit: unit_shape({}, *self._shape_of(unit)))

    def run_seed(self, benchmark: str, run: int) -> int:
        return run_seed(self.config["seed"], benchmark, run)

    def launch_digest(self, system: str, benchmark: str) -> str:
        """What a run computes from: captured config, hyperparameters, every file it executes
        (Implementation.digest, mlrepro/runs/executed_code.py). Not runs, image name, implementation path
        or mounts (pipeline keys: changing them keeps finished runs). Once per unit, not per job; a folder's
        files once for all the systems that run it."""
        if (system, benchmark) not in self._digests:
            impl = self.units[(system, benchmark)].implementation
            if impl.folder not in self._digests:
                self._digests[impl.folder] = impl.digest(self._folder(impl.folder))
            # the captured config by its record's name: what the capture read (its variables are known only later)
            spec = {"capture": self.capture_keys[(system, benchmark)], "params": self.units[(system, benchmark)].params,
                    "files": self._digests[impl.folder]}
            self._digests[(system, benchmark)] = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
        return self._digests[(system, benchmark)]

    def submission(self, system: str) -> dict[str, Any]:
        return {"org": self.config["org"], "platform": system, "division": self.config["division"],
                "status": self.config["status"]}

    @cached_property
    def _stand_in(self) -> Plan:
        return _StandIn(self.config, self.benchmarks, self.data_choices, self.systems, self.units, self.repo)

    def basis(self, value: Callable[[Plan], Any]) -> str:
        """The sha256 of ``value(plan)`` (a text, or JSON's text of it) as it would be were every config file captured
        as exporting nothing: what the rules track of a value read from capture records, which are its jobs' inputs (a
        record is named by what it captured). Known while the DAG is built, and changed with whatever else the value
        is made of."""
        made = value(self._stand_in)
        text = made if isinstance(made, str) else json.dumps(made, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def launch_params(self, system: str, benchmark: str) -> dict[str, Any]:
        """:meth:`launch_spec` as a JSON object, made once per unit (each run job's params carry it)."""
        unit = (system, benchmark)
        if unit not in self._launches:
            self._launches[unit] = self.launch_spec(system, benchmark).to_dict()
        return self._launches[unit]

    def preview_units(self) -> list[dict[str, Any]]:
        """What ``launch_preview``'s job traces, per (system, benchmark): its launch spec, runs, first seed, image
        record, first run's folder and job minutes (mlrepro/runs/preview.py: job)."""
        units = []
        for s, b in self.ordered_units:
            record = self.image_record(b, s)
            units.append({"system": s, "launch": self.launch_params(s, b), "runs": self.units[(s, b)].runs,
                          "seed": self.run_seed(b, 0), "image_record": str(record[0]) if record else None,
                          "log_dir": str(self.out.run_dir(s, b, 0).resolve()), "minutes": self.run_shape(s, b).minutes,
                          "node": self.trace_node(s), "fills": recipe_fills(b)})
        return units

    def launch_spec(self, system: str, benchmark: str) -> LaunchSpec:
        """How every run of a (system, benchmark) is launched, pipeline keys included (the ``launch`` job writes it
        to the unit's launch file, each run passes it to the run driver)."""
        b = self.units[(system, benchmark)]
        impl = b.implementation
        env = self.captured(system, benchmark).env
        shape = self.run_shape(system, benchmark)
        # ours: as the config names it (the generated one is under outdir: relative to the working folder, so that a
        # copied folder launches the same; the driver resolves it where the run starts)
        data_dir = self.dataset_dir(benchmark) if b.mini else b.data_dir
        shaped = benchmark in self.config["job_shapes"]
        return LaunchSpec(
            benchmark=benchmark, kind=impl.kind, name=impl.name, folder=str(impl.folder),
            config_file=impl.config_file.name, script_in_container=impl.script_in_container(), env=env,
            params=b.params, data_dir=str(data_dir), data_mount=impl.data_mount, log_mount=impl.log_mount,
            gpus=self.run_gpus(system, benchmark), threads=self.config["threads_per_run"],
            # processes the driver starts per node (srun/torchrun): those of job_shapes; a config file's
            # run_and_time.sh starts its own per GPU, as run_with_docker.sh runs it once per node
            nodes=shape.nodes, tasks_per_node=shape.tasks_per_node if shaped else 1,
            device=self.config["device"], drop_caches=self.config["drop_caches"],
            submission=self.submission(system), **self._run_sub(system, benchmark, shape))

    def _run_sub(self, system: str, benchmark: str, shape: JobShape) -> dict[str, Any]:
        """A folder with run.sub: the script, the variables the config gives it, its ready image and allocation."""
        b = self.units[(system, benchmark)]
        impl = b.implementation
        if impl.run_sub is None:
            return {}
        imported = self.image_imports.get((system, benchmark))  # a registry image: its system's .sqsh is CONT
        cont = str(Path(imported.sqsh).resolve()) if imported else impl.container  # run.sub runs in its folder
        return {"run_sub": str(impl.run_sub), "container": cont,
                "runsub_env": {"DGXSYSTEM": runsub.dgx_system(impl.config_file,
                                                              self.captured(system, benchmark).env),
                               **run_sub_env(self.systems[system], b)},
                "allocation": self.allocation(system, benchmark)}

    def allocation(self, system: str, benchmark: str) -> dict[str, Any]:
        """What a run asks Slurm for (as the folder's README submits run.sub: sbatch -N DGXNNODES -t WALLTIME,
        with run.sub's #SBATCH lines); node_hours is the upper bound of one run."""
        shape = self.run_shape(system, benchmark)
        slurm = self.config["slurm"]
        extra = run_sub_resources(shape, slurm)["slurm_extra"].split()
        return {"nodes": shape.nodes, "gpus_per_node": shape.gpus_per_node, "time_minutes": shape.minutes,
                "exclusive": "--exclusive" in extra, "sbatch": extra, "partition": slurm["partition"],
                "account": slurm["account"], "qos": slurm["qos"], "constraint": slurm["constraint"]}

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

    # --- specs: what a job acts on, in its rule's params (a changed one re-runs the job), as JSON gives them back
    @cached_property
    def environment_spec(self) -> dict[str, Any]:
        return _canonical(self._environment_spec())

    # The package's and the report's describe each system's implementations, read from the capture records
    # (FileNotFoundError until they are written): they travel in untracked params beside their tracked basis
    def package_spec(self) -> dict[str, Any]:
        return _canonical(self._package_spec())

    def report_spec(self) -> dict[str, Any]:
        return _canonical(self._report_spec())

    def data_spec(self, benchmark: str) -> dict[str, Any]:
        """A mini benchmark's generator block (its dataset's hyperparameters)."""
        return _canonical(self.benchmarks[benchmark].data_params)

    def inference_spec(self, benchmark: str) -> dict[str, Any]:
        """A served benchmark's config (the model it loads)."""
        return _canonical(self.benchmarks[benchmark].params)

    def _environment_spec(self) -> dict[str, Any]:
        c = self.config
        spec = {"org": c["org"], "system": c["system"], "division": c["division"], "status": c["status"],
                "threads": c["threads_per_run"], "device": c["device"]}
        if not all(u.mini for u in self.units.values()):  # the note on our mini workloads is not a vendor's
            spec["mini"] = False
            spec["frameworks"] = self.frameworks
        return spec

    @cached_property
    def frameworks(self) -> dict[str, str]:
        """Each vendor benchmark's framework, from its image: the ready image's reference, else its Dockerfile's
        base (nvcr.io/nvidia/pytorch:24.09-py3 -> "pytorch 24.09-py3 (nvcr.io/nvidia/pytorch:24.09-py3)")."""
        found: dict[str, str] = {}
        for (_, b), unit in self.units.items():
            impl = unit.implementation
            if unit.mini or b in found:
                continue
            refs = [impl.container] if impl.container else base_images(
                impl.folder / "Dockerfile", {k: str(v) for k, v in self.config["build_args"].items()})
            if refs:
                name, _, tag = refs[-1].rsplit("/", 1)[-1].partition(":")
                found[b] = f"{name} {tag or 'latest'} ({refs[-1]})"
        return found

    def _package_spec(self) -> dict[str, Any]:
        c = self.config
        return {
            "org": c["org"], "usage": c["usage"], "ruleset": c["ruleset"], "submittable": self.submittable,
            # each system's description: the probed host's, with its node count and the fields set by hand
            "systems": {s: {"nodes": self.system_nodes(s), "description": self.systems[s].description}
                        for s in self.systems},
            "runs": self.result_files,
            "keep": self.kept_runs,
            "implementations": {b: {
                "kind": spec.implementation.kind, "name": spec.implementation.name,
                "folder": str(spec.implementation.folder), "image": spec.image,
                "config_file": spec.implementation.config_file.name,
                # none for native runs or a ready image (CONT as it is: nothing was built)
                "image_record": next((str(r) for r in self.image_record(b)), None),
            } for b, spec in self.benchmarks.items()},
            "provenance": {"outdir": str(self.out.root), "config": c, "config_hash": self.config_hash,
                           "repo": str(self.repo),  # the Snakefile's checkout, whose git state is recorded
                           "data_manifests": {b: str(self.dataset_dir(b) / MANIFEST) for b in self.benchmarks
                                              if self.benchmarks[b].mini}},
        }

    def _report_spec(self) -> dict[str, Any]:
        return {"config": self.config, "config_hash": self.config_hash, "submittable": self.submittable,
                "benchmarks": {b: {"params": self.benchmarks[b].params, "runs": self.benchmarks[b].runs,
                                   "runs_to_run": len(self.run_indices(b)),
                                   "required_runs": self.benchmarks[b].required_runs}
                               for b in self.ordered_benchmarks},
                "systems": {s: {"nodes": self.system_nodes(s), "implementations": {
                    b: describe_implementation(self.units[(s2, b)].implementation, self.captured(s2, b))
                    for s2, b in self.ordered_units if s2 == s}} for s in self.systems}}


def _canonical(value: Any) -> Any:
    """``value`` as JSON gives it back, keys sorted: the same repr for the same content (Snakemake's params
    trigger compares reprs), and what the job receives (mlrepro/core/job.py)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


STAND_IN = Captured(env={}, nodes=1, gpus_per_node=0, walltime_minutes=None)


class _StandIn(Plan):
    """A plan whose config files all export nothing (:meth:`Plan.basis`)."""

    def captured(self, system: str, benchmark: str) -> Captured:
        return STAND_IN
