"""The offline bundle: the locked images saved as files an auditor can load without a registry."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from mlrepro.core import atomic

CHUNK = 1 << 22


def save_image(client: Any, image_id: str, tag: str, out: Path) -> dict[str, Any]:
    """``docker save`` through the API: a docker-archive tar that keeps the id and the tag."""
    h = hashlib.sha256()
    size = 0
    with atomic.atomic_path(out) as tmp, tmp.open("wb") as f:
        # By tag (named=True) so that `load` restores the name as well as the id.
        image = client.images.get(image_id)
        for chunk in image.save(chunk_size=CHUNK, named=tag if tag in (image.tags or []) else True):
            f.write(chunk)
            h.update(chunk)
            size += len(chunk)
    return {"file": out.name, "sha256": h.hexdigest(), "bytes": size, "id": image_id, "tag": tag,
            "load": f"docker load -i {out.name}   # or: podman load -i {out.name}"}


def copy_file(src: Path, out: Path) -> dict[str, Any]:
    """A .sif or .sqsh is already a single file: copy it and record its hash."""
    with atomic.atomic_path(out) as tmp:
        shutil.copyfile(src, tmp)
    h = hashlib.sha256()
    with out.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return {"file": out.name, "sha256": h.hexdigest(), "bytes": out.stat().st_size}


README = """# Container images of this submission

Load them without registry access, then run the pipeline with `--config images=locked`: each run
checks that the image it uses has the id in images.lock.json.

{lines}

Verify the files first: `sha256sum -c SHA256SUMS`.
"""


def write_index(bundle_dir: Path, entries: list[dict[str, Any]]) -> None:
    atomic.write_text(bundle_dir / "SHA256SUMS", "".join(f"{e['sha256']}  {e['file']}\n" for e in entries))
    lines = "\n".join(f"- `{e['file']}` ({e['bytes'] / 1e6:.0f} MB): "
                      + (f"`{e['load']}` -> {e['id']}" if "load" in e else "use the file as is")
                      for e in entries)
    atomic.write_text(bundle_dir / "README.md", README.format(lines=lines))
    atomic.write_json(bundle_dir / "bundle.json", {"images": entries})
