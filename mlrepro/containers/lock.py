"""The lock file of image digests, and the image reference a run uses.

``images: build`` runs use the tag their build record names; ``images: locked`` runs use the
locked image id (a content digest: it survives ``docker save``/``load``, so an auditor who loads
the bundle gets the same id) and refuse to start when this host does not have that image.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlrepro.containers.errors import ImageMismatch
from mlrepro.core import atomic

LOCK_VERSION = 1
# What the lock keeps of a build record: enough to say what was built from what.
LOCKED_KEYS = ("id", "tag", "repo_digests", "base_images", "build_args", "dockerfile", "dockerfile_sha256",
               "context_sha256", "file", "file_sha256")


def write_lock(path: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    lock = {"version": LOCK_VERSION,
            "images": {r["image"]: {k: r[k] for k in LOCKED_KEYS if k in r} for r in records}}
    atomic.write_json(path, lock)
    return lock


def read_lock(path: Path) -> dict[str, Any]:
    if not Path(path).is_file():
        raise ImageMismatch(f"images: locked, but there is no lock file {path}; "
                            "write one with `snakemake lock_images --config images=build`")
    lock = json.loads(Path(path).read_text())
    if lock.get("version") != LOCK_VERSION:
        raise ImageMismatch(f"{path}: lock version {lock.get('version')!r}, expected {LOCK_VERSION}")
    return lock


def locked_entry(lock_path: Path, image: str) -> dict[str, Any]:
    entry = read_lock(lock_path)["images"].get(image)
    if entry is None:
        raise ImageMismatch(f"image {image!r} is not in the lock file {lock_path}; re-lock with images=build")
    return entry


def local_image(client: Any, ref: str) -> dict[str, Any] | None:
    import docker.errors

    from mlrepro.engines.client import inspect_image

    try:
        return inspect_image(client, ref)
    except docker.errors.ImageNotFound:
        return None


def check_locked(client: Any, image: str, entry: dict[str, Any], lock_path: Path) -> dict[str, Any]:
    """The local image with the locked id; ImageMismatch saying which image and what is here instead."""
    found = local_image(client, entry["id"])
    if found is not None and found["id"] == entry["id"]:
        return found
    by_tag = local_image(client, entry["tag"]) if entry.get("tag") else None
    here = (f"the local {entry['tag']} is {by_tag['id']}" if by_tag
            else "no local image has that id or tag")
    raise ImageMismatch(
        f"image {image!r} is locked to {entry['id']} ({lock_path}) but {here}; "
        "load the bundle (docker/podman load -i <bundle>/<image>.tar) or re-lock with --config images=build")


def check_locked_file(image: str, entry: dict[str, Any], lock_path: Path) -> Path:
    """The locked .sif/.sqsh of apptainer/enroot: present, and the size the lock saw (hashing is the record rule's)."""
    path = Path(entry["file"])
    if not path.is_file():
        raise ImageMismatch(f"image {image!r} is locked to {path} ({lock_path}), which does not exist here; "
                            "copy it from the bundle or re-lock with --config images=build")
    return path


def image_ref(record_path: str | Path, locked: bool, client: Any | None = None) -> str:
    """The reference a run passes to ``engine.run(image=...)``.

    Unlocked: the record's tag (or its .sif/.sqsh file). Locked: the locked id (or file), after
    checking that this host has it; ImageMismatch otherwise. ``client`` is a connected Docker API
    client; when None one is opened from the record's engine and socket.
    """
    record = json.loads(Path(record_path).read_text())
    if not locked:
        return str(record.get("file") or record["tag"])
    lock_path = Path(record["lock"]) if record.get("lock") else None
    if lock_path is None:
        raise ImageMismatch(f"{record_path} was not written in images: locked mode; re-run its rule "
                            "with --config images=locked")
    entry = locked_entry(lock_path, record["image"])
    if entry["id"] != record["id"]:
        raise ImageMismatch(f"image {record['image']!r}: the record {record_path} has {record['id']} but "
                            f"the lock {lock_path} now says {entry['id']}; re-run its rule")
    if entry.get("file"):
        return str(check_locked_file(record["image"], entry, lock_path))
    if client is None:
        from mlrepro.engines.client import connect

        client = connect(record.get("engine", "docker"), record.get("socket"))
    return str(check_locked(client, record["image"], entry, lock_path)["id"])
