"""The apptainer engine: runs the built image as a .sif file (HPC hosts without a container daemon).

The .sif is made from the image the Docker API built (``docker-archive://`` of its saved tar), so
the same image id is recorded; ``--nv`` binds the host's NVIDIA driver only for GPU jobs.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mlrepro.core import untrusted_dir
from mlrepro.engines import Mount, register
from mlrepro.engines._tools import require_tool
from mlrepro.engines.docker_api import DESCRIBE

INSTALL = ("https://apptainer.org/docs/admin/main/installation.html"
           " (Debian/Ubuntu: the apptainer .deb from its GitHub releases)")


class ApptainerEngine:
    name = "apptainer"

    def __init__(self, **_: Any) -> None:
        self.tool = require_tool("apptainer", INSTALL)

    def _exec(self, sif: str, argv: Sequence[str], mounts: Sequence[Mount], gpus: Sequence[int],
              env: dict[str, str], workdir: str | None = None) -> list[str]:
        cmd = [self.tool, "exec", "--containall", "--cleanenv", "--no-home"]
        if gpus:
            cmd.append("--nv")
        for m in mounts:
            cmd += ["--bind", f"{m.path}:{m.inside}:{'ro' if m.read_only else 'rw'}"]
        if workdir:
            cmd += ["--pwd", workdir]
        # --nv binds every GPU; CUDA sees only the run's own
        for k, v in {**env, **({"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))} if gpus else {})}.items():
            cmd += ["--env", f"{k}={v}"]
        return [*cmd, sif, *argv]

    def run(self, argv: Sequence[str], *, image: str | None, mounts: Sequence[Mount], gpus: Sequence[int],
            env: dict[str, str], log: Path, workdir: str | None = None,
            started: Callable[[int], None] | None = None) -> int:  # its processes are the caller's children
        if not image or not image.endswith(".sif"):
            raise ValueError(f"apptainer runs a .sif file, got {image!r}")
        with os.fdopen(untrusted_dir.open_append(log.parent, log.name), "ab") as out:  # no link followed
            return subprocess.run(self._exec(image, argv, mounts, gpus, env, workdir), stdout=out,
                                  stderr=subprocess.STDOUT, check=False).returncode

    def describe(self, image: str | None) -> dict[str, Any]:
        from mlrepro.core.hashing import sha256_file

        assert image
        out = subprocess.run(self._exec(image, ["python", "-c", DESCRIBE], [], [], {}), capture_output=True,
                             text=True, check=True).stdout
        line = next(x for x in out.splitlines() if x.startswith("MLREPRO_ENV "))
        version = subprocess.run([self.tool, "--version"], capture_output=True, text=True, check=False).stdout
        return {"engine": self.name, "engine_version": version.strip(),
                "image": {"file": image, "sha256": f"sha256:{sha256_file(Path(image))}"},
                **json.loads(line.removeprefix("MLREPRO_ENV "))}

    def convert(self, docker_archive: Path, out: Path) -> None:
        """A .sif from a ``docker save`` tar: needs no daemon and no registry."""
        subprocess.run([self.tool, "build", "--force", str(out), f"docker-archive://{docker_archive}"], check=True)


@register("apptainer")
def _factory(**options: Any) -> ApptainerEngine:
    return ApptainerEngine(**options)
