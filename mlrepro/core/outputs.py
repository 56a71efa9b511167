"""Every path the training pipeline writes under its output folder, spelled once.

The rules (through mlrepro/planning/) and the Python stages that read another stage's files take their
paths from here. A system, benchmark or run given as ``"{system}"``/``"{benchmark}"``/``"{run}"`` yields the
rule's pattern.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

Index = int | str  # a run's index, or the "{run}" wildcard


@dataclass(frozen=True)
class Outputs:
    root: Path

    # --- pipeline records
    @property
    def info(self) -> Path:
        return self.root / "pipeline_info"

    def log(self, name: str) -> Path:
        """A job's log (its stdout and stderr)."""
        return self.info / "logs" / f"{name}.log"

    def bench(self, name: str) -> Path:
        """A job's Snakemake benchmark file (wall time, max RSS)."""
        return self.info / "benchmarks" / f"{name}.tsv"

    def capture(self, key: str) -> Path:
        """A config file's captured variables, named by what the capture read (mlrepro/runs/capture.py)."""
        return self.info / "captures" / f"{key}.json"

    @property
    def environment(self) -> Path:
        return self.info / "environment.json"

    # --- data
    def generated_data(self, benchmark: str) -> Path:
        return self.root / "data" / benchmark

    def generated_receipt(self, benchmark: str) -> Path:
        """Each generated file's stamp (size, mtime_ns, inode) when it was hashed."""
        return self.generated_data(benchmark) / ".receipt.json"

    @property
    def receipts(self) -> Path:
        return self.root / "data_receipts"

    def receipt(self, benchmark: str, step: str) -> Path:
        """A recipe step's (or an adopted folder's) receipt: ``download``, ``verify``, ..., ``path``."""
        return self.receipts / benchmark / f"{step}.json"

    @property
    def default_data_root(self) -> Path:
        return self.root / "datasets"

    # --- runs: one folder per (system, benchmark), one per run in it
    # Per-run paths are built from one string each: at 900 runs, planning asks for about 10,000 of them, and
    # joining Path parts one by one cost about 0.2 s of each Snakemake invocation (benchmarks/planning_scale.py).
    def launch(self, system: str, benchmark: str) -> Path:
        return Path(f"{self.root}/runs/{system}/{benchmark}/launch.json")

    def run_dir(self, system: str, benchmark: str, run: Index) -> Path:
        return Path(f"{self.root}/runs/{system}/{benchmark}/{run}")

    def result(self, system: str, benchmark: str, run: Index) -> Path:
        return Path(f"{self.root}/runs/{system}/{benchmark}/{run}/result.txt")

    def summary(self, system: str, benchmark: str, run: Index) -> Path:
        return Path(f"{self.root}/runs/{system}/{benchmark}/{run}/run.json")

    @property
    def gpu_locks(self) -> Path:
        return self.root / ".gpu_locks"

    # --- gate, package, score, report
    def verdict(self, system: str, benchmark: str, run: Index) -> Path:
        """The compliance checker's verdict on one result."""
        return Path(f"{self.root}/compliance/{system}/{benchmark}/{run}.json")

    @property
    def submission(self) -> Path:
        return self.root / "submission"

    def system_desc(self, org: str, system: str) -> Path:
        """A system's description in the package (MLCommons layout: <org>/systems/<system>.json)."""
        return self.submission / org / "systems" / f"{system}.json"

    @property
    def package_verdict(self) -> Path:
        return self.root / "package_check.json"

    @property
    def scores(self) -> Path:
        return self.root / "scores.json"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    # --- containers
    def image_record(self, image: str) -> Path:
        return self.root / "containers" / f"{image}.json"

    def image_log(self, image: str) -> Path:
        return self.root / "containers" / f"{image}.build.log"

    @property
    def default_images_lock(self) -> Path:
        return self.root / "containers" / "images.lock.json"

    @property
    def image_bundle(self) -> Path:
        return self.root / "images" / "bundle.json"

    # --- inference
    @property
    def inference(self) -> Path:
        return self.root / "inference"

    def user_conf(self, benchmark: str) -> Path:
        return self.inference / "conf" / f"{benchmark}.user.conf"

    def inference_run(self, benchmark: str, scenario: str, mode: str) -> Path:
        return self.inference / "runs" / benchmark / scenario / mode

    def inference_audit_test(self, benchmark: str, scenario: str, test: str) -> Path:
        return self.inference / "audit_tests" / benchmark / scenario / test

    @property
    def inference_report(self) -> Path:
        return self.inference / "report.html"


T = TypeVar("T")


class RunGrid(ABC):
    """What the run stage's rules ask of a plan, derived once from its units and their runs: a submission's plan
    (mlrepro/planning) and a reproduction's (mlrepro/reproduce/run_stage.py) differ in which units and runs, not in
    how the rules' paths follow from them."""

    out: Outputs

    @property
    @abstractmethod
    def ordered_units(self) -> list[tuple[str, str]]:
        """Every (system, benchmark), in the order the rules list them."""

    @abstractmethod
    def run_indices(self, benchmark: str) -> range:
        """The indices of a benchmark's runs."""

    def all_runs(self, path: Callable[[str, str, int], T]) -> list[T]:
        """``path(system, benchmark, run)`` (a path, or any value) for every run of the plan."""
        return [path(s, b, i) for s, b in self.ordered_units for i in self.run_indices(b)]

    @property
    def launch_files(self) -> list[Path]:
        """Each (system, benchmark)'s launch file (rules/runs.smk ``launch``)."""
        return [self.out.launch(s, b) for s, b in self.ordered_units]
