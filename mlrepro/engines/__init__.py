"""Where a run's training process executes: the host's Python ("native") or a container engine.

Every engine runs the same argv (``python -m mlrepro.train ...``). Container engines mount each
host path at the same absolute path inside the container, so the argv needs no translation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class Mount:
    path: Path  # the same absolute path on the host and in the container
    read_only: bool = True


class EngineUnavailable(RuntimeError):
    """The engine's tool is missing on this host; the message names it and how to install it."""


class Engine(Protocol):
    name: str

    def run(
        self,
        argv: Sequence[str],
        *,
        image: str | None,
        mounts: Sequence[Mount],
        gpus: bool,
        env: dict[str, str],
        log: Path,
    ) -> int:
        """Run ``argv`` (argv[0] is "python"), appending its output to ``log``; return its exit code."""
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
