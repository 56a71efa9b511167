"""A reproduction as the run stage's rules read it: rules/runs.smk (capture, launch, run) and rules/compliance.smk.

Those rules take every path, param and resource from ``PLAN`` (mlrepro/planning/plan.py); rules/reproduce.smk
includes them with a :class:`ReproducedRuns` as ``PLAN`` instead, so that a reproduced run is a submission's run
with other inputs and outputs, through the same jobs (mlrepro/jobs.py); tests/test_plan_parts.py checks that both give
every name those rules read. Each chosen benchmark of the package is a
unit (the package's system, the benchmark): its config file the staged copy's (captured by the pipeline's capture
job, in the package's image with a container engine), its launch spec the staged copy's with what the capture
recorded (mlrepro/reproduce/launch.py), its seeds the submitted ones; everything under reproduce_out in the
pipeline's layout (mlrepro/core/outputs.py). Only the reproduction's plan (read from the package with bounds) and
the capture records its jobs wrote are read here; nothing is run or written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.core import smk
from mlrepro.core.outputs import Outputs, RunGrid
from mlrepro.datasets.manifest import MANIFEST
from mlrepro.reproduce import launch
from mlrepro.reproduce.plan import BenchmarkPlan, Plan
from mlrepro.runs import capture
from mlrepro.runs.implementation import Captured
from mlrepro.slurm.resources import run_resources, shape_from_config_sh

Unit = tuple[str, str]


@dataclass(frozen=True)
class ReproducedRuns(RunGrid):
    repro: Plan
    config: dict[str, Any]  # the run stage's: the user's config, with images never locked (see for_reproduction)
    root: Path  # reproduce_out
    # the mlperf-logging release that judges the ruleset, as the pipeline's plan finds it (None: the installed one),
    # and the stamp of its install job (rules/release.smk) where it is the releases table's
    logging_release: str | None = None
    release_stamps: list[str] = field(default_factory=list)
    out: Outputs = field(init=False)
    _captured: dict[str, Captured] = field(init=False, default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Outputs(self.root))

    @classmethod
    def for_reproduction(cls, repro: Plan, config: dict[str, Any], root: Path, logging_release: str | None = None,
                         release_stamps: list[str] | None = None) -> ReproducedRuns:
        # a reproduction builds its own images from the package's Dockerfiles (reproduce_image): no images lock
        return cls(repro, {**config, "images": "build"}, root, logging_release, list(release_stamps or []))

    # --- what runs, as the run stage names it
    @property
    def benchmarks(self) -> dict[str, BenchmarkPlan]:
        return self.repro.benchmarks

    @property
    def ordered_units(self) -> list[Unit]:
        return [(self.repro.system, b) for b in self.benchmarks]

    def run_indices(self, benchmark: str) -> range:
        return range(len(self.benchmarks[benchmark].seeds))

    @property
    def system_pattern(self) -> str:
        return re.escape(self.repro.system)

    @property
    def native(self) -> bool:
        return self.config["engine"] == "native"

    @property
    def telemetry_hz(self) -> float:
        telemetry = self.config["telemetry"]
        return telemetry["hz"] if telemetry["enabled"] else 0

    # --- the package's copy and what its jobs made of it
    def staged(self, benchmark: str) -> Path:
        """The staged copy of a benchmark's implementation folder (reproduce_stage), which its runs run."""
        return self.root / "implementation" / benchmark

    def image_record(self, benchmark: str, system: str | None = None) -> list[Path]:
        """The build record of the image the package's code runs in (reproduce_image); none natively."""
        return [] if self.native else [self.root / "containers" / f"{benchmark}.json"]

    def sqsh_record(self, system: str, benchmark: str) -> list[str]:
        """None: a reproduction runs in the image reproduce_image builds from the package, never a registry image
        imported per system (mlrepro/containers/sqsh.py)."""
        return []

    def dataset_dir(self, benchmark: str) -> Path:
        given = self.benchmarks[benchmark].data_dir
        return Path(given) if given else (self.root / "data" / benchmark).resolve()

    def dataset_ready(self, benchmark: str) -> Path:
        """Ours (mini): the dataset the package's generator wrote (reproduce_data); a vendor's is given."""
        return self.root / "data" / benchmark / MANIFEST

    def prepare(self, wildcards: Any = None) -> list[str]:
        """The run rule's preparation: none, everything was checked while the plan was made."""
        return []

    # --- capture: a record per benchmark, of the staged copy's config file
    @property
    def capture_pattern(self) -> str:
        return smk.one_of(re.escape(b) for b in self.benchmarks)

    def capture_file(self, system: str, benchmark: str) -> Path:
        return self.out.capture(benchmark)

    def capture_inputs(self, key: str) -> dict[str, Any]:
        return {"stage": self.staged(key), "image": self.image_record(key)}

    def capture_source(self, key: str) -> Path:
        b = self.benchmarks[key]
        return launch.staged_run_folder(b, self.staged(key).resolve()) / b.config_file

    def capture_checks(self, key: str) -> list[dict[str, Any]]:
        """mlrepro.runs.implementation.unit_problems of the one unit that reads it: its job shape a number, at least
        one node."""
        b = self.benchmarks[key]
        return [{"system": self.repro.system, "benchmark": key, "config_file": str(self.capture_source(key)),
                 "folder": str(self.capture_source(key).parent), "kind": b.kind, "system_nodes": None,
                 "given": {}, "chosen_by": f"benchmarks.{key}.system_config"}]  # no run.sub: no env over its file

    def capture_runs(self, key: str) -> list[dict[str, Any]]:
        """None: a reproduction runs its folder's run_and_time.sh, never a run.sub (mlrepro/reproduce/launch.py)."""
        return []

    def capture_preflight(self, key: str) -> None:
        return None

    def captured(self, system: str, benchmark: str) -> Captured:
        """The job shape the capture record gives; FileNotFoundError (``<TBD>`` while the DAG is built) until its
        capture job has run."""
        if benchmark not in self._captured:
            record = capture.read(self.capture_file(system, benchmark))
            self._captured[benchmark] = launch.shape(self.benchmarks[benchmark], record)
        return self._captured[benchmark]

    # --- launch and run
    @property
    def rerun(self) -> RerunKeys:
        """What the run stage's rules track to run a reproduced job again (mlrepro/planning/rerun_keys.py)."""
        return RerunKeys(self)

    def launch_params(self, system: str, benchmark: str) -> dict[str, Any]:
        """The launch spec of the staged copy with its captured variables, as a JSON object."""
        return launch.launch_spec(self.benchmarks[benchmark], self.staged(benchmark).resolve(),
                                  self.dataset_dir(benchmark), self.captured(system, benchmark),
                                  threads=self.config["threads_per_run"], device=self.config["device"]).to_dict()

    def run_seed(self, benchmark: str, run: int) -> int:
        """The submitted run's seed, as its log gave it."""
        return self.benchmarks[benchmark].seeds[run]

    def scheduled_gpus(self, system: str, benchmark: str) -> int:
        return self.captured(system, benchmark).gpus

    def run_resources(self) -> dict[str, Any]:
        """The job's shape on Slurm (profiles/slurm) from the captured config file, as the pipeline's runs ask."""
        return run_resources(self.config, self.config["threads_per_run"], self.ordered_units,
                             lambda unit: shape_from_config_sh(self.captured(*unit).env))


@dataclass(frozen=True)
class RerunKeys:
    runs: ReproducedRuns

    def basis(self, value: Callable[[Any], Any]) -> str:
        """The sha256 of ``value(plan)`` as it would be with every config file captured as exporting nothing: what the
        rules track of a value read from capture records (mlrepro.planning.rerun_keys.RerunKeys.basis)."""
        r = self.runs
        made = value(_StandIn(r.repro, r.config, r.root, r.logging_release, r.release_stamps))
        text = made if isinstance(made, str) else json.dumps(made, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def launch_digest(self, system: str, benchmark: str) -> str:
        """What a reproduced run computes from: the benchmark's plan (implementation, config file, params, dataset)."""
        doc = dataclasses.asdict(self.runs.benchmarks[benchmark])
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class _StandIn(ReproducedRuns):
    """A reproduction whose config files all export nothing (:meth:`RerunKeys.basis`)."""

    def captured(self, system: str, benchmark: str) -> Captured:
        return Captured(env={}, nodes=1, gpus_per_node=0, walltime_minutes=None)
