"""The build context of an image: an explicit list of repository files, packed reproducibly.

A context made of named files (not the whole repository with a .dockerignore) keeps the virtual
environment, results and .git out of the upload, and gives one hash that changes exactly when
what the image can see changes.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

from mlrepro import PROJECT_ROOT
from mlrepro.core.hashing import sha256_file

# What the Dockerfiles may COPY: the package (its data files too: core/rulesets.yaml), its metadata and the
# benchmarks' implementations.
# Only what runs in the container: a benchmark's defaults.yaml reaches it as --params, so editing
# hyperparameters re-runs that benchmark without rebuilding the image every benchmark uses.
CONTEXT_GLOBS = ("pyproject.toml", "README.md", "LICENSE", "mlrepro/**/*.py", "mlrepro/**/*.yaml",
                 "minis/*/*.py",
                 "minis/*/run_and_time.sh")


def containers_dir(root: Path = PROJECT_ROOT) -> Path:
    return root / "containers"


def image_dir(image: str, root: Path = PROJECT_ROOT) -> Path:
    path = containers_dir(root) / image
    if not (path / "Dockerfile").is_file():
        raise FileNotFoundError(f"{path / 'Dockerfile'}: no Dockerfile for image {image!r}")
    return path


def folder_files(folder: Path) -> list[Path]:
    """An implementation folder's own context: every file in it (its Dockerfile COPYs from there)."""
    return sorted(p.relative_to(folder) for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def context_files(image: str, root: Path = PROJECT_ROOT) -> list[Path]:
    """Repository-relative paths of the context, sorted; the image's own folder is always in it."""
    files: set[Path] = set()
    for pattern in (*CONTEXT_GLOBS, f"containers/{image}/**/*"):
        files.update(p.relative_to(root) for p in root.glob(pattern)
                     if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".egg-info"))
    return sorted(files)


def context_digest(image: str, root: Path = PROJECT_ROOT, files: list[Path] | None = None) -> str:
    """The context's content; ``files`` (relative to ``root``) instead of the image's own list."""
    h = hashlib.sha256()
    for rel in files if files is not None else context_files(image, root):
        h.update(f"{rel.as_posix()}\0{sha256_file(root / rel)}\n".encode())
    return h.hexdigest()


def context_tar(image: str, root: Path = PROJECT_ROOT, files: list[Path] | None = None) -> io.BytesIO:
    """The context as an uncompressed tar with fixed owners and mtimes (same files, same bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files if files is not None else context_files(image, root):
            info = tar.gettarinfo(str(root / rel), arcname=rel.as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o755 if info.mode & 0o111 else 0o644
            with (root / rel).open("rb") as f:
                tar.addfile(info, f)
    buf.seek(0)
    return buf


_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*$", re.I)
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.I)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _lines(dockerfile: Path) -> Iterator[str]:
    pending = ""
    for raw in dockerfile.read_text().splitlines():
        if raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        yield pending + raw
        pending = ""


def base_images(dockerfile: Path, build_args: dict[str, str]) -> list[str]:
    """The FROM images, with the ARGs declared before them substituted (build args win over defaults).

    Stage names (``FROM base AS x`` then ``FROM x``) are not images and are left out.
    """
    args: dict[str, str] = {}
    stages: set[str] = set()
    bases: list[str] = []
    for line in _lines(dockerfile):
        if (m := _ARG.match(line)) and not bases:
            args[m.group(1)] = build_args.get(m.group(1), m.group(2) or "")
        elif m := _FROM.match(line):
            ref = _VAR.sub(lambda v: args.get(v.group(1) or v.group(3), v.group(2) or ""), m.group(1))
            alias = re.search(r"\s+AS\s+(\S+)\s*$", line, re.I)
            if ref not in stages and ref != "scratch":
                bases.append(ref)
            if alias:
                stages.add(alias.group(1))
    return bases
