"""The package's code in a container, when a container engine is configured (``engine: podman | docker | ...``).

The image is built by the pipeline's own builder (mlrepro.containers.jobs.image_record) from the staged copy's
Dockerfile: a vendor implementation's own (its folder is the context), ours ``containers/<image>/Dockerfile``
(the implementation folder is the context, as the package's README says). A build sends the staged files to the
engine; nothing of the package runs on the host. The package's code then runs in that image with the staged copy
mounted read-only at its own path, the outputs (the run's folder, the generated dataset) read-write, and neither
the package nor anything else of the host mounted: the runs through mlrepro.runs.driver (the launch file's
``code``), the dataset generator here, the config file through mlrepro.runs.capture.source_in_image.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mlrepro.engines import Mount, engine_for
from mlrepro.reproduce.errors import ReproduceError
from mlrepro.reproduce.plan import BenchmarkPlan
from mlrepro.runs.implementation import MINI


def build(b: BenchmarkPlan, staged: Path, record: Path, log: Path, *, engine: str, socket: str | None,
          build_args: dict[str, Any], tag_prefix: str, network: bool = False) -> None:
    """Build the image of ``b``'s staged copy and write its build record (the runs' --image-record); without network
    (its Dockerfile's steps fetch nothing, no base image is pulled) unless ``network`` (reproduce_build_network)."""
    from mlrepro.containers.errors import ContainerError
    from mlrepro.containers.jobs import image_record
    from mlrepro.engines import EngineUnavailable

    if not b.dockerfile:
        raise ReproduceError(f"{b.implementation}: no Dockerfile to build the image {b.name} runs in")
    path = staged / b.dockerfile
    if b.kind == MINI:  # containers/<image>/Dockerfile, the implementation folder its context
        image, folder = path.parent.name, None
    else:  # the vendor's own Dockerfile, its folder the context
        image, folder = re.sub(r"[^a-z0-9_.-]+", "-", f"reproduce-{b.name}".lower()), path.parent
    try:
        image_record(image, record, log, engine=engine, socket=socket, mode="build", build_args=build_args,
                     tag_prefix=tag_prefix, lock_path=record.with_name("images.lock.json"), root=staged,
                     folder=folder, network=network)
    except (ContainerError, EngineUnavailable, FileNotFoundError) as e:
        raise ReproduceError(f"{b.name}: the image of the package's implementation ({b.dockerfile}) could not be "
                             f"built with {engine}: {e}") from None


def generate(record: Path, staged: Path, benchmark: str, out: Path, spec: str, seed: int, log: Path) -> None:
    """The package's own data generator (ours: mlrepro.datasets.generated of the staged copy) in the image; only
    the staged copy (read-only) and the data folder (read-write: the dataset is swapped in beside its siblings)
    are mounted."""
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = ["python", *generator_args(benchmark, out, spec, seed)]
    code = _run(record, argv, [Mount(staged, read_only=True), Mount(out.parent, read_only=False)],
                {"PYTHONPATH": str(staged), "PYTHONUNBUFFERED": "1"}, log, str(staged))
    if code != 0:
        raise ReproduceError(f"{benchmark}: the package's data generator exited with status {code} in its image; "
                             f"see {log}")


def generator_args(benchmark: str, out: Path, spec: str, seed: int) -> list[str]:
    """The interpreter's arguments that run the package's data generator (of the first ``mlrepro`` on its path: the
    staged copy's), in its image or natively (mlrepro/reproduce/steps.py)."""
    return ["-m", "mlrepro.datasets.generated", "--benchmark", benchmark, "--out", str(out), "--params", spec,
            "--seed", str(seed)]


def _run(record: Path, argv: list[str], mounts: list[Mount], env: dict[str, str], log: Path, workdir: str) -> int:
    from mlrepro.containers.lock import image_ref

    return engine_for("", record).run(argv, image=image_ref(record, locked=False), mounts=mounts, gpus=[], env=env,
                                      log=log, workdir=workdir)
