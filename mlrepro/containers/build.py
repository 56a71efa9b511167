"""Build one image through the Docker Engine API and describe the result in a build record.

The record (``{outdir}/containers/{image}.json``) is what the DAG's runs depend on: it names the
image id, the base image's id and digests, the build args and the hashes of the Dockerfile and
of the context, so a changed Dockerfile or build arg yields a new record and re-runs only the
benchmarks whose spec names that image.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlrepro import PROJECT_ROOT
from mlrepro.containers.context import base_images, context_digest, context_tar, folder_files, image_dir
from mlrepro.containers.errors import BaseImageMissing, BuildFailed
from mlrepro.core.hashing import sha256_file
from mlrepro.engines.client import inspect_image, server_name

# Docker prints "Step 3/7 : RUN ...", Podman "STEP 3/7: RUN ...".
_STEP = re.compile(r"^\s*(?:Step|STEP)\s+\d+/\d+\s*:\s*(.*)$")
_CACHED = re.compile(r"Using cache")
TAIL_LINES = 40  # of the failing step's output in the error message


def image_tag(image: str, prefix: str, inputs_digest: str) -> str:
    """A tag derived from the inputs: one tag per distinct (Dockerfile, context, build args)."""
    return f"{prefix}{image}:{inputs_digest[:12]}"


def inputs_digest(dockerfile_sha: str, context_sha: str, build_args: dict[str, str]) -> str:
    text = json.dumps({"dockerfile": dockerfile_sha, "context": context_sha, "build_args": build_args},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def ensure_base(client: Any, ref: str, platform: str | None = None, pull: bool = True) -> dict[str, Any]:
    """The base image's identity; pulled when absent (``pull``); BaseImageMissing (naming it) when that fails."""
    import docker.errors

    try:
        return inspect_image(client, ref)
    except docker.errors.ImageNotFound:
        if not pull:
            raise BaseImageMissing(
                f"base image {ref} is not in the local image store, and this build may not use the network (a "
                "reproduction's: reproduce_build_network); pull or load it yourself if you trust it, or allow the "
                "network with --config reproduce_build_network=true") from None
    reason = "not found after pulling"
    try:
        client.images.pull(ref, platform=platform) if platform else client.images.pull(ref)
        return inspect_image(client, ref)
    except docker.errors.DockerException as exc:
        reason = str(getattr(exc, "explanation", None) or exc).splitlines()[0][:200]
    raise BaseImageMissing(
        f"base image {ref} is not in the local image store and could not be pulled ({reason}); "
        "pull or load it (docker/podman load -i ...), or point build_args.BASE_IMAGE at a local image")


def _stream(chunks: Iterable[dict[str, Any]], log: Path) -> tuple[str | None, int, int]:
    """Write the build output to ``log``; return (image id, steps, cached steps); BuildFailed on error."""
    image_id: str | None = None
    step, step_lines = "", []  # the current step and its output, for the error message
    steps = cached = 0
    with log.open("w", encoding="utf-8") as out:
        for chunk in chunks:
            if "error" in chunk or "errorDetail" in chunk:
                error = chunk.get("error") or chunk.get("errorDetail", {}).get("message", "")
                out.write(f"ERROR: {error}\n")
                tail = "".join(step_lines[-TAIL_LINES:]).rstrip()
                raise BuildFailed(f"build step failed: {step or '(before the first step)'}\n"
                                  f"{tail}\n{error.strip()}\n(full log: {log})")
            if aux := chunk.get("aux"):
                image_id = aux.get("ID") or image_id
            text = chunk.get("stream") or ""
            if not text:
                continue
            out.write(text)
            for line in text.splitlines(keepends=True):
                if m := _STEP.match(line):
                    step, step_lines, steps = m.group(1).strip(), [], steps + 1
                else:
                    step_lines.append(line)
                    cached += bool(_CACHED.search(line))
                if m := re.match(r"^(?:Successfully built|COMMIT\s*\S*\s*-->)?\s*([0-9a-f]{12,64})\s*$", line):
                    image_id = image_id or m.group(1)
    return image_id, steps, cached


def build_image(
    client: Any,
    image: str,
    *,
    build_args: dict[str, str] | None = None,
    tag_prefix: str = "mlrepro-",
    log: Path,
    root: Path = PROJECT_ROOT,
    nocache: bool = False,
    folder: Path | None = None,
    platform: str | None = None,
    network: bool = True,
) -> dict[str, Any]:
    """Build ``containers/<image>/Dockerfile`` with the repository as context; return its build record.

    ``folder``: an implementation folder instead, built from its own Dockerfile with itself as context.
    ``platform``: the nodes' platform where it is not the builder's (``linux/arm64`` for GB200 nodes).
    ``network``: False builds without network (its steps fetch nothing) and pulls no base image (a package's).
    """
    args = {k: str(v) for k, v in (build_args or {}).items()}
    files = None
    if folder is not None:
        root, files = folder, folder_files(folder)
        dockerfile = folder / "Dockerfile"
    else:
        dockerfile = image_dir(image, root) / "Dockerfile"
    dockerfile_sha = sha256_file(dockerfile)
    context_sha = context_digest(image, root, files)
    # the platform is part of what the image is built from: an arm64 image never passes for an amd64 one
    tag = image_tag(image, tag_prefix, inputs_digest(dockerfile_sha, context_sha,
                                                     {**args, **({"platform": platform} if platform else {})}))
    refs = base_images(dockerfile, args)
    if not refs:
        raise BaseImageMissing(f"{dockerfile}: names no base image (no FROM line, or only FROM scratch); "
                               "start it with `ARG FROM_IMAGE_NAME=<image>` and `FROM ${FROM_IMAGE_NAME}`")
    bases = [ensure_base(client, ref, platform, pull=network) for ref in refs]
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    chunks = client.api.build(
        fileobj=context_tar(image, root, files), custom_context=True,
        dockerfile=dockerfile.relative_to(root).as_posix(), tag=tag, buildargs=args,
        rm=True, forcerm=True, pull=False, nocache=nocache, decode=True, **({"platform": platform} if platform else {}),
        **({} if network else {"network_mode": "none"}))
    _, steps, cached = _stream(chunks, log)
    seconds = time.monotonic() - started
    info = inspect_image(client, tag)  # authoritative over the id the log text mentions
    return {
        "image": image,
        "tag": tag,
        "id": info["id"],
        "repo_digests": info["repo_digests"],
        "size_bytes": info["size_bytes"],
        "base_images": bases,
        "build_args": args,
        **({"platform": platform} if platform else {}),
        "dockerfile": dockerfile.relative_to(root).as_posix(),
        "dockerfile_sha256": dockerfile_sha,
        "context_sha256": context_sha,
        "builder": server_name(client),
        "build_seconds": round(seconds, 2),
        "steps": steps,
        "cached_steps": cached,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def read_record(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
