"""The launch file of a benchmark's reproduced runs, as rules/runs.smk writes it for the main pipeline.

Written by a job, from the staged copy: its config file is sourced there by bash (mlrepro.runs.implementation
.capture), never while the DAG is built. The job shape the plan read from the config file's text
(mlrepro/reproduce/config_sh.py) must be the one bash finds, or the runs would be scheduled wrongly.
"""

from __future__ import annotations

from pathlib import Path

from mlrepro.reproduce.errors import ReproduceError
from mlrepro.reproduce.plan import BenchmarkPlan
from mlrepro.runs.implementation import DATA_MOUNTS, LOG_MOUNT, MINI, RUN_SCRIPT, ImplementationError, capture
from mlrepro.runs.launch_spec import LaunchSpec


def staged_run_folder(b: BenchmarkPlan, staged: Path) -> Path:
    return staged / Path(b.run_folder).relative_to(b.implementation)


def _checked_env(b: BenchmarkPlan, config: Path, staged: Path, image_record: Path | None) -> dict[str, str]:
    try:
        if image_record is None:
            env = capture(config)
        else:
            from mlrepro.reproduce.image import capture_in_image

            env = capture_in_image(image_record, config, staged)
    except ImplementationError as e:
        raise ReproduceError(f"{b.name}: {e}") from None
    try:
        nodes, per_node = int(env.get("DGXNNODES") or 1), int(env.get("DGXNGPU") or 0)
    except ValueError:
        raise ReproduceError(f"{config}: DGXNNODES or DGXNGPU is not a whole number.") from None
    if nodes < 1 or per_node < 0:
        raise ReproduceError(f"{config}: DGXNNODES={nodes}, DGXNGPU={per_node}: a run needs DGXNNODES >= 1 and "
                             "DGXNGPU >= 0.")
    if (nodes, nodes * per_node) != (b.nodes, b.gpus):
        raise ReproduceError(
            f"{config}: sourced by bash it gives {nodes} node(s) and {nodes * per_node} GPU(s), but its text (read "
            f"without a shell when the reproduction was planned) gives {b.nodes} and {b.gpus}: the runs would be "
            "scheduled with the wrong shape. Write DGXNNODES and DGXNGPU in it as plain numbers.")
    return env


def launch_spec(b: BenchmarkPlan, staged: Path, data_dir: Path, *, threads: int, device: str,
                image_record: Path | None = None) -> LaunchSpec:
    """The launch file mlrepro.runs.driver reads, for the staged copy of the package's implementation; its config
    file sourced natively or (``image_record``) in the image the runs use. With a container engine the driver
    mounts the staged copy (``code``) read-only and runs it there."""
    run_folder = staged_run_folder(b, staged)
    env = _checked_env(b, run_folder / b.config_file, staged, image_record)
    if b.kind == MINI:  # its training code is the package's: the staged copy comes first on the path
        env["PYTHONPATH"] = str(staged)
    return LaunchSpec(benchmark=b.name, kind=b.kind, name=Path(b.implementation).name, folder=str(run_folder),
                      config_file=b.config_file, script_in_container=f"./{RUN_SCRIPT}", env=env, params=b.params,
                      data_dir=str(data_dir), data_mount=DATA_MOUNTS.get(b.name, "/data"), log_mount=LOG_MOUNT,
                      gpus=b.gpus, threads=threads, nodes=b.nodes, tasks_per_node=1, device=device,
                      drop_caches=False, submission=b.submission, code=str(staged))


def write_launch(b: BenchmarkPlan, staged: Path, data_dir: Path, out: Path, *, threads: int, device: str,
                 image_record: Path | None = None) -> None:
    launch_spec(b, staged.resolve(), data_dir.resolve(), threads=threads, device=device,
                image_record=image_record).write(out)
