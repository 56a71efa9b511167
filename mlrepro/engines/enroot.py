"""The enroot engine: the Slurm/pyxis path, running the built image imported as a .sqsh file.

``srun --container-image=<file>.sqsh`` (pyxis) runs the same file; this engine runs it directly
with ``enroot create``/``start`` so a job needs no pyxis. GPUs are exposed by enroot's NVIDIA hook,
which follows NVIDIA_VISIBLE_DEVICES: "void" keeps them out of CPU jobs.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mlrepro.core import untrusted_dir
from mlrepro.engines import Mount, register
from mlrepro.engines._tools import require_tool, visible_env
from mlrepro.engines.docker_api import DESCRIBE

INSTALL = "https://github.com/NVIDIA/enroot/blob/master/doc/installation.md (enroot and enroot+caps .deb packages)"


class EnrootEngine:
    name = "enroot"

    def __init__(self, **_: Any) -> None:
        self.tool = require_tool("enroot", INSTALL)

    def _start(self, sqsh: str, argv: Sequence[str], mounts: Sequence[Mount], gpus: Sequence[int],
               env: dict[str, str], out: Any) -> int:
        name = f"mlrepro-{uuid.uuid4().hex[:12]}"
        subprocess.run([self.tool, "create", "--name", name, sqsh], check=True, stdout=subprocess.DEVNULL)
        try:
            cmd = [self.tool, "start"]
            for m in mounts:
                cmd += ["--mount", f"{m.path}:{m.inside}:none,bind,{'ro' if m.read_only else 'rw'}"]
            # enroot's NVIDIA hook exposes exactly NVIDIA_VISIBLE_DEVICES ("void": none)
            # (inside, they are numbered from 0: CUDA_VISIBLE_DEVICES is not set)
            for k, v in {**env, "NVIDIA_VISIBLE_DEVICES": visible_env(list(gpus))["NVIDIA_VISIBLE_DEVICES"]}.items():
                cmd += ["--env", f"{k}={v}"]
            return subprocess.run([*cmd, name, *argv], stdout=out, stderr=subprocess.STDOUT,
                                  check=False).returncode
        finally:
            subprocess.run([self.tool, "remove", "--force", name], check=False, stdout=subprocess.DEVNULL)

    def run(self, argv: Sequence[str], *, image: str | None, mounts: Sequence[Mount], gpus: Sequence[int],
            env: dict[str, str], log: Path, workdir: str | None = None,
            started: Callable[[int], None] | None = None) -> int:  # its processes are the caller's children
        if not image or not image.endswith(".sqsh"):
            raise ValueError(f"enroot runs a .sqsh file, got {image!r}")
        if workdir:  # enroot start has no working-directory option
            argv = ["sh", "-c", 'cd "$0" && exec "$@"', workdir, *argv]
        with os.fdopen(untrusted_dir.open_append(log.parent, log.name), "ab") as out:  # no link followed
            return self._start(image, argv, mounts, gpus, env, out)

    def describe(self, image: str | None) -> dict[str, Any]:
        import tempfile

        from mlrepro.core.hashing import sha256_file

        assert image
        with tempfile.TemporaryFile() as out:
            self._start(image, ["python", "-c", DESCRIBE], [], [], {}, out)
            out.seek(0)
            line = next(x for x in out.read().decode().splitlines() if x.startswith("MLREPRO_ENV "))
        version = subprocess.run([self.tool, "version"], capture_output=True, text=True, check=False).stdout
        return {"engine": self.name, "engine_version": version.strip(),
                "image": {"file": image, "sha256": f"sha256:{sha256_file(Path(image))}"},
                **json.loads(line.removeprefix("MLREPRO_ENV "))}

    def convert(self, builder: str, image_id: str, out: Path) -> None:
        """A .sqsh from the image in the local Docker or Podman store (enroot reads both directly)."""
        scheme = "podman" if builder == "podman" else "dockerd"
        subprocess.run([self.tool, "import", "--output", str(out), f"{scheme}://{image_id}"], check=True)


@register("enroot")
def _factory(**options: Any) -> EnrootEngine:
    return EnrootEngine(**options)
