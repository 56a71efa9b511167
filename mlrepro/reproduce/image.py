"""The package's code in a container, when a container engine is configured (``engine: podman | docker | ...``).

The image is built by the pipeline's own builder (mlrepro.containers.jobs.image_record) from the staged copy's
Dockerfile: a vendor implementation's own (its folder is the context), ours ``containers/<image>/Dockerfile``
(the implementation folder is the context, as the package's README says). A build sends the staged files to the
engine; nothing of the package runs on the host. The package's code then runs in that image with the staged copy
mounted read-only at its own path, the outputs (the run's folder, the generated dataset) read-write, and neither
the package nor anything else of the host mounted: the runs through mlrepro.runs.driver (the launch file's
``code``), the dataset generator here.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from mlrepro.core import safe_read
from mlrepro.engines import Mount, engine_for
from mlrepro.reproduce.errors import ReproduceError
from mlrepro.reproduce.plan import BenchmarkPlan
from mlrepro.runs.implementation import CLEAN_ENV, MINI, ImplementationError, parse_env0


def build(b: BenchmarkPlan, staged: Path, record: Path, log: Path, *, engine: str, socket: str | None,
          build_args: dict[str, Any], tag_prefix: str) -> None:
    """Build the image of ``b``'s staged copy and write its build record (the runs' --image-record)."""
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
                     folder=folder)
    except (ContainerError, EngineUnavailable, FileNotFoundError) as e:
        raise ReproduceError(f"{b.name}: the image of the package's implementation ({b.dockerfile}) could not be "
                             f"built with {engine}: {e}") from None


def generate(record: Path, staged: Path, benchmark: str, out: Path, spec: str, seed: int, log: Path) -> None:
    """The package's own data generator (ours: mlrepro.datasets.generated of the staged copy) in the image; only
    the staged copy (read-only) and the data folder (read-write: the dataset is swapped in beside its siblings)
    are mounted."""
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = ["python", "-m", "mlrepro.datasets.generated", "--benchmark", benchmark, "--out", str(out),
            "--params", spec, "--seed", str(seed)]
    code = _run(record, argv, [Mount(staged, read_only=True), Mount(out.parent, read_only=False)],
                {"PYTHONPATH": str(staged), "PYTHONUNBUFFERED": "1"}, log, str(staged))
    if code != 0:
        raise ReproduceError(f"{benchmark}: the package's data generator exited with status {code} in its image; "
                             f"see {log}")


def _run(record: Path, argv: list[str], mounts: list[Mount], env: dict[str, str], log: Path, workdir: str) -> int:
    from mlrepro.containers.lock import image_ref

    return engine_for("", record).run(argv, image=image_ref(record, locked=False), mounts=mounts, gpus=[], env=env,
                                      log=log, workdir=workdir)


def capture_in_image(record: Path, config: Path, staged: Path) -> dict[str, str]:
    """The variables the staged config file exports, sourced by bash in the image (as
    mlrepro.runs.implementation.capture does natively: ``set -a``, a clean environment, what bash and the image
    set left out unless the file changes them)."""
    with tempfile.TemporaryDirectory(prefix=".capture.", dir=staged.parent) as tmp:
        out, log = Path(tmp), Path(tmp) / "bash.log"
        # bash's builtins only (an image need not have env): every exported name, NUL-separated as env -0 prints
        script = ('d() { local v; for v in $(compgen -e); do printf "%s=%s\\0" "$v" "${!v}"; done; }; '
                  'd > /capture/base; set -a; source "$1" >&2; set +a; d > /capture/env')
        code = _run(record, ["bash", "-c", script, "bash", str(config)],
                    [Mount(staged, read_only=True), Mount(out, read_only=False, target="/capture")], CLEAN_ENV, log,
                    str(config.parent))
        if code != 0 or not (out / "env").is_file():
            raise ImplementationError(f"{config}: sourcing it with bash in its image failed (exit {code}):\n"
                                      f"{log.read_text(errors='replace').strip()[-2000:]}\nFix the config file, or "
                                      "choose another with benchmarks.<bm>.system_config.")
        try:  # regular files inside the folder only: the config file may have put links to host files there
            base, env = (parse_env0(safe_read.read_bytes(out / name, out)) for name in ("base", "env"))
        except safe_read.UnsafeInput as e:
            raise ImplementationError(f"{config}: sourced in its image, it left {e}") from None
    return {k: v for k, v in env.items() if k != "_" and base.get(k) != v}
