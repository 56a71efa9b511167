"""How each (system, benchmark) launches: its job shape, GPUs, allocation, image import and launch spec.

Made from what runs (mlrepro/planning/what_runs.py) and the unit's captured config file (mlrepro/planning/captures.py):
whatever a config file gives (its shape, its variables) raises FileNotFoundError, naming the record, until its capture
job has run. The rules ask for these values through functions of jobs that take the record as an input
(mlrepro/planning/rerun_keys.py says what they track instead). Reads the records only; starts nothing.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mlrepro.containers import sqsh
from mlrepro.core import smk
from mlrepro.datasets.vendor_fills import recipe_fills
from mlrepro.planning.captures import Captures
from mlrepro.planning.what_runs import Unit, WhatRuns
from mlrepro.runs import runsub
from mlrepro.runs.accelerators import machine_gpus
from mlrepro.runs.launch_spec import LaunchSpec
from mlrepro.slurm import node_env
from mlrepro.slurm.resources import JobShape, run_resources, run_sub_resources, shape_for, unit_shape
from mlrepro.systems import run_sub_env


@dataclass(frozen=True)
class Launches:
    runs: WhatRuns
    captures: Captures
    # each unit's shape, the parts of it the config gives, its launch spec as a JSON object: once per unit, not per job
    _shapes: dict[Unit, JobShape] = field(init=False, default_factory=dict, compare=False, repr=False)
    _shape_parts: dict[Unit, Any] = field(init=False, default_factory=dict, compare=False, repr=False)
    _params: dict[Unit, dict[str, Any]] = field(init=False, default_factory=dict, compare=False, repr=False)

    # --- shapes and GPUs
    def shape(self, system: str, benchmark: str) -> JobShape:
        """Nodes, processes per node, GPUs and walltime of a (system, benchmark)'s runs: job_shapes.<benchmark> in
        the config, else its captured config file (DGXNNODES, DGXNGPU, WALLTIME); the system's nodes where it has
        them."""
        unit = (system, benchmark)
        if unit not in self._shapes:
            configured, nodes, sbatch = self.shape_parts(unit)
            env = {} if configured else self.captures.captured(system, benchmark).env
            self._shapes[unit] = unit_shape(env, configured, nodes, sbatch)
        return self._shapes[unit]

    def shape_parts(self, unit: Unit) -> tuple[JobShape | None, int | None, tuple[str, ...] | None]:
        """What a unit's shape takes besides its config file: job_shapes.<benchmark>, the system's nodes, and for
        a folder with run.sub the #SBATCH options its allocation keeps (mlrepro.slurm.resources.unit_shape). Once per
        unit: asked for each job while its config file is not captured yet."""
        if unit not in self._shape_parts:
            config = self.runs.config
            run_sub = self.runs.units[unit].implementation.run_sub
            self._shape_parts[unit] = (
                shape_for(config, unit[1]) if unit[1] in config["job_shapes"] else None,
                self.runs.systems[unit[0]].nodes, tuple(runsub.kept_sbatch(run_sub)) if run_sub else None)
        return self._shape_parts[unit]

    @property
    def shapes(self) -> dict[Unit, JobShape]:
        """Every (system, benchmark)'s job shape (:meth:`shape`); FileNotFoundError while a config file that gives
        one is not captured."""
        return {unit: self.shape(*unit) for unit in self.runs.ordered_units}

    @property
    def known_shapes(self) -> dict[str, JobShape]:
        """Each (system, benchmark)'s job shape known now (configured, or its config file captured) as
        ``<system>/<benchmark>``: what Slurm's preflight checks before the first job."""
        known = {}
        for s, b in self.runs.ordered_units:
            try:
                known[f"{s}/{b}"] = self.shape(s, b)
            except FileNotFoundError:
                continue  # captured by its job before any run of it is submitted
        return known

    def system_nodes(self, system: str) -> int:
        """The system description's number_of_nodes: the system's, else its largest run's."""
        nodes = self.runs.systems[system].nodes
        return nodes or max((self.shape(s, b).nodes for s, b in self.runs.ordered_units if s == system), default=1)

    @cached_property
    def local_gpus(self) -> int:
        """This machine's GPUs, for Snakemake's local scheduling only (``resources: gpus``; ignored on Slurm, where
        each run's GPUs are its allocation's and the driver finds them there: mlrepro/runs/accelerators.py)."""
        return machine_gpus() if self.runs.config["gpus"] == "auto" else int(self.runs.config["gpus"])

    def gpus(self, system: str, benchmark: str) -> int:
        """Accelerators a run holds: nodes x GPUs per node of its config; ours one where it trains on a GPU
        (device cuda; device auto: one if the machine that runs it has one, the driver decides)."""
        gpus = self.captures.captured(system, benchmark).gpus
        if gpus == 0 and self.runs.units[(system, benchmark)].mini and self.runs.config["device"] != "cpu":
            return 1
        return gpus

    def scheduled_gpus(self, system: str, benchmark: str) -> int:
        """What a run holds of Snakemake's local ``gpus`` resource: device auto on a machine without GPUs: none."""
        gpus = self.gpus(system, benchmark)
        mini = self.runs.units[(system, benchmark)].mini
        return 0 if mini and self.runs.config["device"] == "auto" and not self.local_gpus else gpus

    def preflight(self, key: str) -> dict[str, Any]:
        """What the capture job of record ``key`` asks Slurm on a cluster, as its first runs' preflight: the shape of
        every unit that reads it, against the partition (mlrepro.slurm.checks; the onstart hook checks the shapes it
        knows then)."""
        config = self.runs.config
        units = {f"{s}/{b}": {"configured": dataclasses.asdict(c) if c else None, "nodes": n, "sbatch": sb}
                 for (s, b), k in self.captures.keys.items() if k == key for c, n, sb in [self.shape_parts((s, b))]}
        return {"partition": config["slurm"].get("partition"), "threads": config["threads_per_run"],
                "engine": config["engine"], "units": units}

    def resources(self) -> dict[str, Any]:
        """The run rule's Slurm resources (mlrepro.slurm.resources.run_resources) of every unit's shape."""
        return run_resources(self.runs.config, self.runs.config["threads_per_run"], self.runs.ordered_units,
                             lambda unit: self.shape(*unit),
                             stand_in=lambda unit: unit_shape({}, *self.shape_parts(unit)))

    # --- images a run.sub is given, and the nodes' Python (engine enroot, Slurm)
    @cached_property
    def image_imports(self) -> dict[Unit, sqsh.Import]:
        """Engine enroot: each (system, benchmark) whose run.sub is given a registry image (benchmarks.<bm>.image),
        with its system's import of it into a .sqsh (mlrepro.containers.sqsh), once per system and reference."""
        runs = self.runs
        if runs.config["engine"] != "enroot":
            return {}
        return {unit: sqsh.planned(runs.out.root, unit[0], str(impl.container), runs.systems[unit[0]].platform)
                for unit, b in runs.units.items() if (impl := b.implementation).run_sub is not None
                and impl.container is not None and sqsh.is_registry_ref(impl.container)}

    def image_import(self, system: str, benchmark: str) -> dict[str, Any] | None:
        """What the launch preview shows of a unit's image import (mlrepro.containers.sqsh.describe: the step's argv,
        the .sqsh, where it runs, its size once imported); None where its run.sub is given the image as it is."""
        job = self.image_imports.get((system, benchmark))
        return sqsh.describe(job) if job else None

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
        return smk.one_of(sorted({re.escape(Path(j.sqsh).name) for j in self.image_imports.values()}))

    @cached_property
    def node_environments(self) -> dict[str, node_env.NodeEnv]:
        """Each system's Python on its nodes (mlrepro.slurm.node_env): the venv of its architecture (platform);
        NodeEnvError naming the system where its nodes cannot run the checkout's venv and slurm.node_venvs is unset."""
        found = {}
        for name, system in self.runs.systems.items():
            try:
                found[name] = node_env.for_system(system.platform, self.runs.config["slurm"].get("node_venvs"),
                                                  self.runs.repo / ".venv")
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

    # --- the launch spec
    def spec(self, system: str, benchmark: str) -> LaunchSpec:
        """How every run of a (system, benchmark) is launched, pipeline keys included (the ``launch`` job writes it
        to the unit's launch file, each run passes it to the run driver)."""
        runs, config = self.runs, self.runs.config
        b = runs.units[(system, benchmark)]
        impl = b.implementation
        env = self.captures.captured(system, benchmark).env
        shape = self.shape(system, benchmark)
        # ours: as the config names it (the generated one is under outdir: relative to the working folder, so that a
        # copied folder launches the same; the driver resolves it where the run starts)
        data_dir = runs.dataset_dir(benchmark) if b.mini else b.data_dir
        shaped = benchmark in config["job_shapes"]
        return LaunchSpec(
            benchmark=benchmark, kind=impl.kind, name=impl.name, folder=str(impl.folder),
            config_file=impl.config_file.name, script_in_container=impl.script_in_container(), env=env,
            params=b.params, data_dir=str(data_dir), data_mount=impl.data_mount, log_mount=impl.log_mount,
            gpus=self.gpus(system, benchmark), threads=config["threads_per_run"],
            # processes the driver starts per node (srun/torchrun): those of job_shapes; a config file's
            # run_and_time.sh starts its own per GPU, as run_with_docker.sh runs it once per node
            nodes=shape.nodes, tasks_per_node=shape.tasks_per_node if shaped else 1,
            device=config["device"], drop_caches=config["drop_caches"],
            submission=runs.submission(system), **self._run_sub(system, benchmark))

    def _run_sub(self, system: str, benchmark: str) -> dict[str, Any]:
        """A folder with run.sub: the script, the variables the config gives it, its ready image and allocation."""
        b = self.runs.units[(system, benchmark)]
        impl = b.implementation
        if impl.run_sub is None:
            return {}
        imported = self.image_imports.get((system, benchmark))  # a registry image: its system's .sqsh is CONT
        cont = str(Path(imported.sqsh).resolve()) if imported else impl.container  # run.sub runs in its folder
        return {"run_sub": str(impl.run_sub), "container": cont,
                "runsub_env": {"DGXSYSTEM": runsub.dgx_system(impl.config_file,
                                                              self.captures.captured(system, benchmark).env),
                               **run_sub_env(self.runs.systems[system], b)},
                "allocation": self.allocation(system, benchmark)}

    def allocation(self, system: str, benchmark: str) -> dict[str, Any]:
        """What a run asks Slurm for (as the folder's README submits run.sub: sbatch -N DGXNNODES -t WALLTIME,
        with run.sub's #SBATCH lines); node_hours is the upper bound of one run."""
        shape = self.shape(system, benchmark)
        slurm = self.runs.config["slurm"]
        extra = run_sub_resources(shape, slurm)["slurm_extra"].split()
        return {"nodes": shape.nodes, "gpus_per_node": shape.gpus_per_node, "time_minutes": shape.minutes,
                "exclusive": "--exclusive" in extra, "sbatch": extra, "partition": slurm["partition"],
                "account": slurm["account"], "qos": slurm["qos"], "constraint": slurm["constraint"]}

    def params(self, system: str, benchmark: str) -> dict[str, Any]:
        """:meth:`spec` as a JSON object, made once per unit (each run job's params carry it)."""
        unit = (system, benchmark)
        if unit not in self._params:
            self._params[unit] = self.spec(system, benchmark).to_dict()
        return self._params[unit]

    def preview_units(self) -> list[dict[str, Any]]:
        """What ``launch_preview``'s job traces, per (system, benchmark): its launch spec, runs, first seed, image
        record, first run's folder and job minutes (mlrepro/runs/preview.py: job)."""
        runs, units = self.runs, []
        for s, b in runs.ordered_units:
            record = runs.image_record(b, s)
            units.append({"system": s, "launch": self.params(s, b), "runs": runs.units[(s, b)].runs,
                          "seed": runs.run_seed(b, 0), "image_record": str(record[0]) if record else None,
                          "log_dir": str(runs.out.run_dir(s, b, 0).resolve()), "minutes": self.shape(s, b).minutes,
                          "node": runs.trace_node(s), "fills": recipe_fills(b)})
        return units
