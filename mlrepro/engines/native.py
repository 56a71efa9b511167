"""The native engine: the training process runs in the Python environment of the pipeline itself."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mlrepro.core import untrusted_dir
from mlrepro.core.probe import python_environment
from mlrepro.engines import Mount, register
from mlrepro.engines._tools import visible_env


class NativeEngine:
    name = "native"

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
        started: Callable[[int], None] | None = None,  # the process is the caller's child: nothing to report
    ) -> int:
        cmd = [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]
        # A launcher script's `python` is this interpreter, activated or not.
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        full = {**os.environ, "PATH": path, **env, **visible_env(list(gpus or []))}
        with os.fdopen(untrusted_dir.open_append(log.parent, log.name), "ab") as out:  # no link followed
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=full, cwd=workdir,
                                  check=False).returncode

    def describe(self, image: str | None) -> dict[str, Any]:
        return {"engine": self.name, "image": None, **python_environment()}


@register("native")
def _factory(**_options: Any) -> NativeEngine:
    return NativeEngine()
