"""The native engine: the training process runs in the Python environment of the pipeline itself."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlrepro.engines import Mount, register
from mlrepro.environment import python_environment


class NativeEngine:
    name = "native"

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
        cmd = [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]
        with log.open("ab") as out:
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                  check=False).returncode

    def describe(self, image: str | None) -> dict[str, Any]:
        return {"engine": self.name, "image": None, **python_environment()}


@register("native")
def _factory(**_options: Any) -> NativeEngine:
    return NativeEngine()
