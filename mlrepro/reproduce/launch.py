"""A benchmark's reproduced runs: their job shape and launch spec, from the staged copy's captured config file.

The staged copy's config file is sourced by bash in the pipeline's capture job (rules/runs.smk ``capture``), in the
package's image with a container engine (mlrepro.runs.capture.source_in_image), natively otherwise, never while the
DAG is built; its record gives the runs' job shape and the launch spec's variables (mlrepro/reproduce/run_stage.py).
"""

from __future__ import annotations

from pathlib import Path

from mlrepro.reproduce.errors import ReproduceError
from mlrepro.reproduce.plan import BenchmarkPlan
from mlrepro.runs import capture
from mlrepro.runs.implementation import (
    DATA_MOUNTS,
    LOG_MOUNT,
    MINI,
    RUN_SCRIPT,
    Captured,
    ImplementationError,
    captured,
)
from mlrepro.runs.launch_spec import LaunchSpec


def staged_run_folder(b: BenchmarkPlan, staged: Path) -> Path:
    return staged / Path(b.run_folder).relative_to(b.implementation)


def shape(b: BenchmarkPlan, record: capture.Record) -> Captured:
    """The job shape the captured config file gives (DGXNNODES >= 1, DGXNGPU a whole number)."""
    config = Path(record.config_file)
    try:
        found = captured(record.env, config, config.parent, b.kind)
    except ImplementationError as e:
        raise ReproduceError(f"{b.name}: {e}") from None
    if found.nodes < 1:
        raise ReproduceError(f"{config}: DGXNNODES={found.nodes}: a run needs DGXNNODES >= 1.")
    return found


def launch_spec(b: BenchmarkPlan, staged: Path, data_dir: Path, found: Captured, *, threads: int,
                device: str) -> LaunchSpec:
    """The launch spec mlrepro.runs.driver runs, for the staged copy of the package's implementation, with its
    config file's captured variables and job shape (:func:`shape`). With a container engine the driver mounts the
    staged copy (``code``) read-only and runs it there."""
    run_folder = staged_run_folder(b, staged)
    env = dict(found.env)
    if b.kind == MINI:  # its training code is the package's: the staged copy comes first on the path
        env["PYTHONPATH"] = str(staged)
    return LaunchSpec(benchmark=b.name, kind=b.kind, name=Path(b.implementation).name, folder=str(run_folder),
                      config_file=b.config_file, script_in_container=f"./{RUN_SCRIPT}", env=env, params=b.params,
                      data_dir=str(data_dir), data_mount=DATA_MOUNTS.get(b.name, "/data"), log_mount=LOG_MOUNT,
                      gpus=found.gpus, threads=threads, nodes=found.nodes, tasks_per_node=1, device=device,
                      drop_caches=False, submission=b.submission, code=str(staged))
