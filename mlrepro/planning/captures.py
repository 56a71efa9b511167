"""The config files' captures: each (system, benchmark)'s config file as the record its capture job wrote gives it.

What a config file exports comes from its capture record (mlrepro/runs/capture.py), which a job writes (rules/runs.smk
``capture``), never planning. The record is named by what capturing the file reads (the folder's content: a changed
file is a new record); :meth:`Captures.captured` reads it, and raises FileNotFoundError (naming the record, as the jobs
that read it name it in their inputs) until that job has run. :class:`StandInCaptures` gives every unit a record that
exports nothing: what the rules track of a value read from records (mlrepro/planning/rerun_keys.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mlrepro.core import smk
from mlrepro.datasets.vendor_fills import recipe_fills
from mlrepro.planning.what_runs import Unit, WhatRuns
from mlrepro.runs import capture
from mlrepro.runs.implementation import Captured, captured, unit_problems
from mlrepro.systems import run_sub_env


@dataclass(frozen=True)
class Captures:
    runs: WhatRuns
    # each folder's content (once, for every key and digest of its units), each unit's config file as captured
    _folders: dict[Path, str] = field(init=False, default_factory=dict, compare=False, repr=False)
    _captured: dict[Unit, Captured] = field(init=False, default_factory=dict, compare=False, repr=False)

    def folder_digest(self, folder: Path) -> str:
        """A folder's content (mlrepro.runs.capture.folder_digest), hashed once for all its units."""
        if folder not in self._folders:
            self._folders[folder] = capture.folder_digest(folder)
        return self._folders[folder]

    def _record_if_any(self, key: str) -> capture.Record | None:
        path = self.runs.out.capture(key)
        return capture.read(path) if path.is_file() else None

    @cached_property
    def keys(self) -> dict[Unit, str]:
        """Each (system, benchmark)'s capture record, by its name: what capturing its config file reads
        (mlrepro.runs.capture.key). Units with the same config file in folders of the same content share one."""
        units = self.runs.units
        return {unit: capture.key(impl.folder, impl.config_file.name, self.folder_digest(impl.folder),
                                  self._record_if_any)
                for unit in self.runs.ordered_units for impl in [units[unit].implementation]}

    @cached_property
    def _paths(self) -> dict[Unit, Path]:
        return {unit: self.runs.out.capture(key) for unit, key in self.keys.items()}

    def file(self, system: str, benchmark: str) -> Path:
        return self._paths[(system, benchmark)]

    @cached_property
    def files(self) -> list[Path]:
        return sorted(set(self._paths.values()))

    @property
    def pattern(self) -> str:
        """The ``key`` wildcard's constraint: exactly the plan's record names."""
        return smk.one_of(sorted(set(self.keys.values())))

    def source(self, key: str) -> Path:
        """The config file the record ``key`` captures (of the first unit that reads it)."""
        return next(self.runs.units[u].implementation.config_file for u, k in self.keys.items() if k == key)

    def _check(self, unit: Unit) -> dict[str, Any]:
        """What mlrepro.runs.implementation.unit_problems checks of a unit besides its config file's variables."""
        system, benchmark = unit
        impl, systems = self.runs.units[unit].implementation, self.runs.systems
        chosen_by = (f"systems.{system}.config_files.{benchmark}" if self.runs.config.get("systems")
                     else f"benchmarks.{benchmark}.system_config")
        return {"system": system, "benchmark": benchmark, "config_file": str(impl.config_file),
                "folder": str(impl.folder), "kind": impl.kind, "system_nodes": systems[system].nodes,
                "given": run_sub_env(systems[system], self.runs.units[unit]), "chosen_by": chosen_by}

    def checks(self, key: str) -> list[dict[str, Any]]:
        """The capture job's checks: those of every unit that reads the record ``key``."""
        return [self._check(u) for u, k in self.keys.items() if k == key]

    def run_subs(self, key: str) -> list[dict[str, Any]]:
        """What the capture job of record ``key`` runs each run.sub with to find what it needs set
        (mlrepro/runs/demands.py, mlrepro.runs.capture_job): per unit with run.sub that reads the record, what a run
        gives it besides the config file's variables, and the node it runs on. ``cont``: the folder's ready image;
        None where it is built from the folder's Dockerfile (the job names it so)."""
        runs, found = self.runs, []
        for (system, benchmark), k in self.keys.items():
            b = runs.units[(system, benchmark)]
            impl = b.implementation
            if k != key or impl.run_sub is None:
                continue
            found.append({"system": system, "benchmark": benchmark, "run_sub": str(impl.run_sub),
                          "config_file": str(impl.config_file), "given": run_sub_env(runs.systems[system], b),
                          "cont": impl.container, "data_dir": str(b.data_dir),
                          "log_dir": str(runs.out.run_dir(system, benchmark, 0).resolve()),
                          "seed": runs.run_seed(benchmark, 0), "submission": runs.submission(system),
                          "node": runs.trace_node(system), "fills": recipe_fills(benchmark)})
        return found

    def problems(self) -> list[str]:
        """What stops the runs of units whose config file is captured (their records read, nothing run): the lines
        of mlrepro.runs.implementation.unit_problems. A record not written yet is checked by the job that writes it."""
        return [line for unit in self.runs.ordered_units if (path := self.file(*unit)).is_file()
                for line in unit_problems(capture.read(path).env, **self._check(unit))]

    def captured(self, system: str, benchmark: str) -> Captured:
        """The unit's config file as its capture record gives it: its variables and job shape. FileNotFoundError
        (the record's path, as the jobs that read it name it in their inputs) where its capture job has not run."""
        unit = (system, benchmark)
        if unit not in self._captured:
            b = self.runs.units[unit]
            impl = b.implementation
            record = capture.read(self.file(system, benchmark))
            # run.sub runs with the config's env over the config file's (runsub.environment): so is its shape
            given = run_sub_env(self.runs.systems[system], b) if impl.run_sub else {}
            self._captured[unit] = captured({**record.env, **given}, impl.config_file, impl.folder, impl.kind)
        return self._captured[unit]


STAND_IN = Captured(env={}, nodes=1, gpus_per_node=0, walltime_minutes=None)


class StandInCaptures(Captures):
    """Every config file captured as exporting nothing (mlrepro.planning.rerun_keys.RerunKeys.basis)."""

    def captured(self, system: str, benchmark: str) -> Captured:
        return STAND_IN
