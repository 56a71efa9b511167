"""What the rules of rules/containers.smk do: build or verify an image, lock, bundle (their jobs: ``*_job``)."""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

from mlrepro import PROJECT_ROOT
from mlrepro.containers import bundle
from mlrepro.containers.build import build_image, read_record
from mlrepro.containers.errors import ContainerError, ImageMismatch
from mlrepro.containers.lock import check_locked, check_locked_file, locked_entry, write_lock
from mlrepro.core import atomic
from mlrepro.core.hashing import sha256_file
from mlrepro.core.job import Job
from mlrepro.engines import EngineUnavailable
from mlrepro.engines.client import connect, server_name

# apptainer/enroot run a file made from the image the Docker API built.
FILE_SUFFIX = {"apptainer": ".sif", "enroot": ".sqsh"}


def builder_engine(engine: str) -> str:
    """Which Docker API builds: the engine itself, or for apptainer/enroot whatever answers at the socket."""
    return engine if engine in ("docker", "podman") else "podman"


def _convert(engine: str, client: Any, record: dict[str, Any], out: Path) -> None:
    from mlrepro.engines import get_engine

    tool: Any = get_engine(engine)  # EngineUnavailable, one line, before any work
    with atomic.atomic_path(out) as tmp:
        if engine == "apptainer":
            with tempfile.TemporaryDirectory(dir=out.parent) as work:
                tar = Path(work) / "image.tar"
                bundle.save_image(client, record["id"], record["tag"], tar)
                tool.convert(tar, tmp)
        else:
            tmp.unlink()  # enroot refuses to overwrite
            tool.convert(server_name(client), record["id"], tmp)


def image_record(
    image: str,
    out: Path,
    log: Path,
    *,
    engine: str,
    socket: str | None,
    mode: str,
    build_args: dict[str, Any],
    tag_prefix: str,
    lock_path: Path,
    root: Path = PROJECT_ROOT,
    folder: Path | None = None,
    platform: str | None = None,
    network: bool = True,
) -> dict[str, Any]:
    """Write ``{outdir}/containers/{image}.json``: build the image (mode build) or check it against the lock.
    ``network``: False builds without network and pulls no base image (a reproduced package's).

    A failure's one-line cause is also appended to ``log``, which Snakemake points the user to.
    """
    try:
        return _image_record(image, out, log, engine=engine, socket=socket, mode=mode, build_args=build_args,
                             tag_prefix=tag_prefix, lock_path=lock_path, root=root, folder=folder,
                             platform=platform, network=network)
    except (ContainerError, EngineUnavailable) as exc:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as f:
            f.write(f"\nERROR: {exc}\n")
        raise


def _image_record(image: str, out: Path, log: Path, *, engine: str, socket: str | None, mode: str,
                  build_args: dict[str, Any], tag_prefix: str, lock_path: Path, root: Path,
                  folder: Path | None, platform: str | None = None, network: bool = True) -> dict[str, Any]:
    client = connect(builder_engine(engine), socket)
    if mode == "locked":
        entry = locked_entry(lock_path, image)
        found = None if entry.get("file") else check_locked(client, image, entry, lock_path)
        if entry.get("file"):
            path = check_locked_file(image, entry, lock_path)
            if f"sha256:{sha256_file(path)}" != entry["file_sha256"]:
                raise ImageMismatch(f"image {image!r}: {path} does not have the locked hash {entry['file_sha256']}")
        record = {**entry, "image": image, "lock": str(lock_path), "engine": engine, "socket": socket,
                  "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if found:
            record["id"] = found["id"]
        log.write_text(f"{image}: locked {record['id']} present\n")  # in place: the job's own output goes there too
    else:
        record = build_image(client, image, build_args=build_args, tag_prefix=tag_prefix, log=log, root=root,
                             folder=folder, platform=platform, network=network)
        record.update(engine=engine, socket=socket)
        if engine in FILE_SUFFIX:
            file = out.with_suffix(FILE_SUFFIX[engine])
            _convert(engine, client, record, file)
            record.update(file=str(file.resolve()), file_sha256=f"sha256:{sha256_file(file)}")
    atomic.write_json(out, record)
    return record


def image_job(job: Job) -> None:
    """rules/containers.smk container_image: the build's output is the job's log."""
    p = job.params
    image_record(job.wildcards["image"], job.output["record"], Path(str(job.log)), engine=p["engine"],
                 socket=p["socket"], mode=p["mode"], build_args=p["build_args"], tag_prefix=p["tag_prefix"],
                 lock_path=Path(p["lock"]), root=Path(p["repo"]), folder=Path(p["folder"]) if p["folder"] else None,
                 platform=p["platform"] or None)


def lock(records: list[Path], lock_path: Path) -> None:
    write_lock(lock_path, [read_record(p) for p in records])


def lock_job(job: Job) -> None:
    """rules/containers.smk lock_images: every image's build record into the lock file."""
    lock(list(job.input), job.output.first)


def bundle_job(job: Job) -> None:
    make_bundle(job.input.first, job.output.first.parent, engine=job.params["engine"], socket=job.params["socket"])


def make_bundle(lock_path: Path, bundle_dir: Path, *, engine: str, socket: str | None) -> dict[str, Any]:
    """Save every locked image into ``bundle_dir`` with the lock, checksums and loading instructions."""
    from mlrepro.containers.lock import read_lock

    lock_data = read_lock(lock_path)
    bundle_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    client = None
    for image, entry in sorted(lock_data["images"].items()):
        if entry.get("file"):
            src = Path(entry["file"])
            entries.append(bundle.copy_file(src, bundle_dir / f"{image}{src.suffix}"))
            continue
        client = client or connect(builder_engine(engine), socket)
        check_locked(client, image, entry, lock_path)
        entries.append(bundle.save_image(client, entry["id"], entry["tag"], bundle_dir / f"{image}.tar"))
    atomic.write_bytes(bundle_dir / "images.lock.json", lock_path.read_bytes())
    bundle.write_index(bundle_dir, entries)
    return {"images": entries, "lock_sha256": hashlib.sha256(lock_path.read_bytes()).hexdigest()}
