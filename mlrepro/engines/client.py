"""One connection to a Docker Engine API: Docker's daemon or Podman's compatible service.

The ``docker`` SDK speaks the same API to both, so building, saving and running share one code path.
The docker/podman engines run through it; mlrepro.containers builds, locks and bundles through it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from mlrepro.engines import EngineUnavailable

INSTALL = {
    "docker": "install Docker Engine (https://docs.docker.com/engine/install/) and start dockerd",
    "podman": "apt-get install -y podman runc, then `podman system service --time=0 unix:///run/podman/podman.sock &`",
}
START = {"docker": "systemctl start docker",
         "podman": "podman system service --time=0 unix:///run/podman/podman.sock &"}


def default_socket(engine: str) -> str:
    """The API URL when the config names none: the engines' own environment variables, then their defaults."""
    if engine == "podman":
        if url := os.environ.get("CONTAINER_HOST"):
            return url
        if os.geteuid() != 0 and (run := os.environ.get("XDG_RUNTIME_DIR")):
            return f"unix://{run}/podman/podman.sock"
        return "unix:///run/podman/podman.sock"
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def connect(engine: str = "docker", socket: str | None = None, timeout: int = 600) -> Any:
    """A ``docker.DockerClient`` that has answered a ping; a one-line EngineUnavailable otherwise."""
    import docker
    import docker.errors

    kind = "podman" if engine == "podman" else "docker"
    url = socket or default_socket(kind)
    if url.startswith("unix://") and not Path(url.removeprefix("unix://")).exists():
        hint = (f"start its service ({START[kind]})" if shutil.which(kind) else f"{kind} is not installed: "
                f"{INSTALL[kind]}")
        raise EngineUnavailable(f"{kind}: no Docker-compatible API socket at {url}; {hint}, "
                                "or set config engine_socket")
    try:
        client = docker.DockerClient(base_url=url, timeout=timeout)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        raise EngineUnavailable(f"{kind}: the API at {url} does not answer ({exc}); {INSTALL[kind]}") from exc
    return client


def inspect_image(client: Any, ref: str) -> dict[str, Any]:
    """An image's identity: id, digests, tags (``docker.errors.ImageNotFound`` when absent)."""
    attrs = client.api.inspect_image(ref)
    return {"ref": ref, "id": attrs["Id"] if attrs["Id"].startswith("sha256:") else f"sha256:{attrs['Id']}",
            "repo_digests": sorted(attrs.get("RepoDigests") or []), "tags": sorted(attrs.get("RepoTags") or []),
            "created": attrs.get("Created"), "size_bytes": attrs.get("Size")}


def server_name(client: Any) -> str:
    """'podman' or 'docker', from what the server says it is (not from the config)."""
    components = client.version().get("Components") or []
    return "podman" if any("podman" in str(c.get("Name", "")).lower() for c in components) else "docker"
