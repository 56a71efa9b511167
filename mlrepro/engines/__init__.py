"""Where a run's training process executes: the host's Python ("native") or a container engine.

Every engine runs the same argv (``bash run_and_time.sh`` of the run's implementation). Container
engines mount each host path at its ``target`` (by default the same absolute path).
This package owns the run boundary: the engine interface, its errors and the Docker API client
(:mod:`mlrepro.engines.client`); the image building in :mod:`mlrepro.containers` depends on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mlrepro.core.errors import MlreproError


@dataclass(frozen=True)
class Mount:
    path: Path  # on the host
    read_only: bool = True
    target: str | None = None  # in the container; None: the host path

    @property
    def inside(self) -> str:
        return self.target or str(self.path)


class EngineUnavailable(MlreproError, RuntimeError):
    """The engine's tool is missing on this host; the message names it and how to install it."""


class Engine(Protocol):
    name: str

    def run(
        self,
        argv: Sequence[str],
        *,
        image: str | None,
        mounts: Sequence[Mount],
        gpus: Sequence[int],
        env: dict[str, str],
        log: Path,
        workdir: str | None = None,
        started: Callable[[int], None] | None = None,
    ) -> int:
        """Run ``argv``, appending its output to ``log``; return its exit code.

        ``gpus``: the host's GPU indices the run may see (none: a CPU run); ``workdir``: where it
        starts (None: the image's WORKDIR, or the current folder natively); ``started``: called with
        the host pid of a container's init process, whose processes are not the caller's descendants.
        """
        ...

    def describe(self, image: str | None) -> dict[str, Any]:
        """The software environment a run sees: versions, ``pip freeze``, image digest where there is one."""
        ...


# Factories take keyword options (socket=..., for the Docker API engines) and ignore those they do not use.
ENGINES: dict[str, Callable[..., Engine]] = {}


def register(name: str) -> Callable[[Callable[..., Engine]], Callable[..., Engine]]:
    def deco(factory: Callable[..., Engine]) -> Callable[..., Engine]:
        ENGINES[name] = factory
        return factory

    return deco


def get_engine(name: str, **options: Any) -> Engine:
    """The engine ``name``; EngineUnavailable (one line: the tool and how to install it) when its tool is missing.

    ``options``: ``socket`` (the Docker API URL of the docker/podman engines; None: their default).
    """
    from mlrepro.engines import apptainer, docker_api, enroot, native  # noqa: F401  (register themselves)

    if name not in ENGINES:
        raise EngineUnavailable(f"engine {name!r} is not available; known engines: {', '.join(sorted(ENGINES))}")
    return ENGINES[name](**options)


def engine_for(name: str, image_record: Path | None) -> Engine:
    """The engine a stage uses: for a container image the one its build record names, with its socket
    (one source, so a run cannot reach another engine than the one its image was built on)."""
    if image_record is None:
        return get_engine(name)
    from mlrepro.core import untrusted_dir

    # the record names the engine and its socket: trusted only as a file of this user's that no one else can write
    record = json.loads(untrusted_dir.read_record(Path(image_record), 1 << 20))
    return get_engine(record["engine"], socket=record.get("socket"))
