"""The docker and podman engines: one implementation over the Docker Engine API (the ``docker`` SDK).

Podman's service answers the same API, so the engines differ only in their default socket and in
how a GPU is requested: Docker takes a DeviceRequest (the NVIDIA container toolkit), Podman a CDI
device name (``nvidia.com/gpu=all``, after ``nvidia-ctk cdi generate``).
"""

from __future__ import annotations

import json
import os
import shlex
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mlrepro.core import probe, untrusted_dir
from mlrepro.engines import Mount, register

# What a run's image holds, read inside it by mlrepro/core/probe.py's own source (standard library
# only): a vendor's image has no mlrepro installed, and the host's versions are not what the runs use.
DESCRIBE = (Path(probe.__file__).read_text()
            + "\nimport json, platform\nprint('MLREPRO_ENV ' + json.dumps({**python_environment(), "
              "'os': platform.platform()}))\n")


# Where a run's container sees the folder of its log. The container writes its output there itself, the way
# a shell redirect does, instead of the engine's log stream: Podman 4.3 drops lines that its log file holds in
# parts. A writer that buffers in blocks splits lines, and in 6 of 6 runs of 3,000 lines, about 10 were lost,
# through the stream and the finished log alike. tests/test_containers_podman.py shows it.
LOG_DIR = "/.mlrepro-log"


# The code a container runs may be a package's, untrusted; a rootful engine runs it as root on the host's kernel. It
# gains no privilege (setuid binaries of its image do nothing) and holds no capability; Podman mounts the outputs
# nosuid,nodev (Docker's API takes no such bind option: a setuid file it leaves in a run folder is caught by the run
# driver, mlrepro/core/untrusted_dir.py planted).
HARDENED: dict[str, Any] = {"security_opt": ["no-new-privileges"], "cap_drop": ["ALL"]}


class DockerApiEngine:
    def __init__(self, name: str, socket: str | None = None) -> None:
        from mlrepro.engines.client import connect

        self.name = name
        self._mount_options = ",nosuid,nodev" if name == "podman" else ""
        self.socket = socket
        self.client = connect(name, socket)  # fails here, in one line, when the engine is not there

    def _gpu_options(self, gpus: Sequence[int]) -> dict[str, Any]:
        """Only the run's own GPUs enter the container (they are numbered from 0 inside)."""
        import docker.types

        if self.name == "podman":
            return {"devices": [f"nvidia.com/gpu={i}" for i in gpus], "ipc_mode": "host"}
        return {"device_requests": [docker.types.DeviceRequest(device_ids=[str(i) for i in gpus],
                                                               capabilities=[["gpu"]])], "ipc_mode": "host"}

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
        """Run argv in a fresh container; its output goes to ``log`` as it comes, and is kept on failure."""
        import docker.types

        if not image:
            raise ValueError(f"engine {self.name} needs an image")
        volumes = {str(m.path): {"bind": m.inside, "mode": ("ro" if m.read_only else "rw") + self._mount_options}
                   for m in mounts}
        log.parent.mkdir(parents=True, exist_ok=True)
        # the container appends to it (owned here: the container's user may not create it); no link followed
        os.close(untrusted_dir.open_append(log.parent, log.name))
        to_log = [docker.types.Mount(target=LOG_DIR, source=str(log.parent.resolve()), type="bind", read_only=False)]
        argv = ["sh", "-c", f'exec "$@" >>{LOG_DIR}/{shlex.quote(log.name)} 2>&1', "sh", *argv]
        for m in mounts:
            if not m.read_only:
                m.path.mkdir(parents=True, exist_ok=True)  # else the engine creates it, owned by root
        options: dict[str, Any] = self._gpu_options(list(gpus)) if gpus else {}
        if workdir:
            options["working_dir"] = workdir
        if os.getuid() != 0:
            # Results on the host belong to whoever ran the pipeline, not to the container's root.
            options["user"] = f"{os.getuid()}:{os.getgid()}"
            env = {"HOME": "/tmp", **env}
        container = self.client.containers.create(
            image, argv, name=f"mlrepro-{uuid.uuid4().hex[:12]}", environment=env, volumes=volumes,
            mounts=to_log, network_mode="none",  # a run computes on mounted data; it must not fetch anything
            labels={"mlrepro": "run"}, **HARDENED, **options)
        try:
            container.start()
            if started is not None:
                container.reload()
                if pid := int(container.attrs.get("State", {}).get("Pid") or 0):
                    started(pid)
            return int(container.wait().get("StatusCode", 1))
        finally:
            container.remove(force=True)

    def describe(self, image: str | None) -> dict[str, Any]:
        """The image's identity plus the Python environment and ``pip freeze`` seen inside it."""
        from mlrepro.engines.client import inspect_image

        if not image:
            raise ValueError(f"engine {self.name} needs an image")
        out = self.client.containers.run(image, ["python", "-c", DESCRIBE], network_mode="none", remove=True,
                                         stdout=True, stderr=False, **HARDENED)
        line = next(x for x in out.decode().splitlines() if x.startswith("MLREPRO_ENV "))
        version = self.client.version()
        return {"engine": self.name, "engine_version": version.get("Version"),
                "image": inspect_image(self.client, image), **json.loads(line.removeprefix("MLREPRO_ENV "))}


@register("docker")
def _docker(socket: str | None = None, **_: Any) -> DockerApiEngine:
    return DockerApiEngine("docker", socket)


@register("podman")
def _podman(socket: str | None = None, **_: Any) -> DockerApiEngine:
    return DockerApiEngine("podman", socket)
