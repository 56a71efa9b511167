"""A base image made from this machine's own Python environment, for hosts without a registry.

CI and air-gapped machines cannot pull ``nvcr.io/nvidia/pytorch``; the project's Dockerfile only
needs a ``python`` with torch and pip on PATH, so a rootfs holding this interpreter, the
distributions the runs import (with their dependency closure, so ``pip install -r`` is a no-op
offline) and the shared libraries they link against stands in for it. It is imported through the
Docker Engine API, so the same code works against Docker and Podman.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import io
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

# What a run imports inside the container (containers/pytorch/requirements.txt plus torch, numpy,
# and pip/setuptools for the offline ``pip install`` of mlrepro).
ROOTS = ("torch", "numpy", "mlperf-logging", "pycocotools", "psutil", "nvidia-ml-py", "pyyaml", "pip",
         "setuptools")
# Large parts nobody imports at run time.
SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "site-packages", "ensurepip"}
SKIP_PREFIXES = ("torch/test/", "torch/include/", "../", "/")
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
SITE = f"usr/local/lib/{PY}/site-packages"
LIBDIR = "usr/lib/x86_64-linux-gnu"  # a default search dir of the loader: no ld.so.cache needed
ROOTFS_VERSION = "rootfs 2: dash and bash"  # in the fingerprint: a changed layout is a new base image


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def closure(roots: Iterable[str] = ROOTS) -> list[md.Distribution]:
    """The installed distributions ``roots`` need, following their (marker-filtered) requirements."""
    seen: dict[str, md.Distribution] = {}
    stack = list(roots)
    while stack:
        name = _norm(stack.pop())
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # an optional dependency this environment lacks: the runs do without it too
        seen[name] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                stack.append(req.name)
    return sorted(seen.values(), key=lambda d: _norm(d.metadata["Name"]))


def fingerprint(dists: list[md.Distribution]) -> str:
    """Names the base by what it holds, so a test session reuses the one a previous session imported."""
    text = "\n".join([ROOTFS_VERSION, sys.version, *(f"{d.metadata['Name']}=={d.version}" for d in dists)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _needed_libs(elves: list[Path], own: set[Path]) -> set[Path]:
    """Host libraries the ELF files load, by ``ldd``, minus those the rootfs already carries."""
    libs: set[Path] = set()
    for i in range(0, len(elves), 64):  # one ldd call per batch: hundreds of files, two cores
        out = subprocess.run(["ldd", *map(str, elves[i:i + 64])], capture_output=True, text=True,
                             check=False).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
                lib = Path(parts[2])
            elif parts and parts[0].startswith("/") and not parts[0].endswith(":"):
                lib = Path(parts[0])  # the loader itself
            else:
                continue
            if lib.resolve() not in own:
                libs.add(lib)
    return libs


class _Rootfs:
    """Streams a rootfs into a tar file: files keep their mtimes, so torch's .pyc stay valid."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.names: set[str] = set()

    def dir(self, name: str, mode: int = 0o755) -> None:
        if name in self.names:
            return
        parent = str(Path(name).parent)
        if parent not in (".", "/"):
            self.dir(parent)
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, int(time.time())
        self.tar.addfile(info)
        self.names.add(name)

    def symlink(self, name: str, target: str) -> None:
        if name in self.names:
            return
        self.dir(str(Path(name).parent))
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
        self.tar.addfile(info)
        self.names.add(name)

    def file(self, name: str, src: Path) -> None:
        if name in self.names:
            return
        self.dir(str(Path(name).parent))
        info = self.tar.gettarinfo(str(src), arcname=name)
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if info.isreg():
            with src.open("rb") as f:
                self.tar.addfile(info, f)
        else:
            self.tar.addfile(info)
        self.names.add(name)

    def text(self, name: str, content: str, mode: int = 0o644) -> None:
        self.dir(str(Path(name).parent))
        data = content.encode()
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        self.tar.addfile(info, io.BytesIO(data))
        self.names.add(name)

    def host_lib(self, lib: Path) -> None:
        """A host library at its Debian multiarch path, with the symlink chain that names it."""
        real = lib.resolve()
        self.file(f"{LIBDIR}/{real.name}", real)
        if lib.name != real.name:
            self.symlink(f"{LIBDIR}/{lib.name}", real.name)


def _walk(root: Path, skip_top: set[str]) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root:
            dirnames[:] = [d for d in dirnames if d not in skip_top]
        for name in filenames:
            yield Path(dirpath) / name


def write_rootfs(out: Path, dists: list[md.Distribution]) -> dict[str, Any]:
    """Write the rootfs tar; return what it holds (for the benchmark's figures)."""
    prefix = Path(sys.base_prefix)
    stdlib = Path(sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})["stdlib"])
    elves: list[Path] = []
    own: set[Path] = set()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        fs = _Rootfs(tar)
        for top in ("usr/bin", "usr/lib", "usr/lib64", "usr/sbin"):
            fs.dir(top)
        for link in ("bin", "lib", "lib64", "sbin"):  # Debian 12's merged /usr
            fs.symlink(link, f"usr/{link}")
        fs.dir("tmp", 0o1777)
        fs.dir("root", 0o700)
        fs.dir("workspace")
        fs.text("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n")
        fs.text("etc/group", "root:x:0:\nnogroup:x:65534:\n")
        # The interpreter, renamed into /usr/local as in the python:3.x images.
        exe = Path(sys.base_prefix) / "bin" / PY
        fs.file(f"usr/local/bin/{PY}", exe.resolve())
        fs.symlink("usr/local/bin/python3", PY)
        fs.symlink("usr/local/bin/python", PY)
        fs.text("usr/local/bin/pip", f"#!/bin/sh\nexec /usr/local/bin/{PY} -m pip \"$@\"\n", 0o755)
        elves.append(exe.resolve())
        for lib in (prefix / "lib").glob("libpython*.so*"):
            fs.file(f"{LIBDIR}/{lib.name}", lib)
            own.add(lib.resolve())
        for src in _walk(stdlib, SKIP_STDLIB):
            fs.file(f"usr/local/lib/{PY}/{src.relative_to(stdlib)}", src)
            if src.suffix == ".so":
                elves.append(src)
        n_files = 0
        for dist in dists:
            for rel in dist.files or []:
                name = rel.as_posix()
                if name.startswith(SKIP_PREFIXES):
                    continue
                src = Path(str(dist.locate_file(rel)))
                if not src.is_file():
                    continue
                fs.file(f"{SITE}/{name}", src)
                n_files += 1
                own.add(src.resolve())
                if ".so" in src.name and _is_elf(src):
                    elves.append(src)
        # /bin/sh for the Dockerfile's RUN steps.
        dash = Path("/usr/bin/dash")
        fs.file("usr/bin/dash", dash)
        fs.symlink("usr/bin/sh", "dash")
        elves.append(dash)
        # bash for the implementations' run_and_time.sh, as NGC images have it
        fs.file("usr/bin/bash", Path("/usr/bin/bash"))
        elves.append(Path("/usr/bin/bash"))
        libs = _needed_libs(elves, own) | {Path(p) for p in ("/lib/x86_64-linux-gnu/libgcc_s.so.1",)
                                            if Path(p).exists()}
        for lib in sorted(libs):
            fs.host_lib(lib)
        loader = Path("/lib64/ld-linux-x86-64.so.2")
        fs.host_lib(loader)
        fs.dir("usr/lib64")
        fs.symlink("usr/lib64/ld-linux-x86-64.so.2", f"/{LIBDIR}/{loader.resolve().name}")
    return {"distributions": len(dists), "site_files": n_files, "host_libraries": len(libs),
            "tar_bytes": out.stat().st_size}


def ensure_base_image(client: Any, repository: str = "localhost/mlrepro-localbase",
                      workdir: Path | None = None) -> dict[str, Any]:
    """Import the base image unless an image with its fingerprint is already there; return its ref and timings.

    ``client`` is a ``docker.DockerClient`` (Docker or Podman's compatible API).
    """
    import docker.errors

    dists = closure()
    ref = f"{repository}:{fingerprint(dists)}"
    try:
        image = client.images.get(ref)
        return {"ref": ref, "id": image.id, "imported": False}
    except docker.errors.ImageNotFound:
        pass
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mlrepro-rootfs-", dir=workdir) as tmp:
        tar = Path(tmp) / "rootfs.tar"
        stats = write_rootfs(tar, dists)
        t1 = time.monotonic()
        repo, tag = ref.rsplit(":", 1)
        # The API takes the tar as the request body; a file object streams it instead of reading it whole.
        with tar.open("rb") as f:
            answer = client.api.import_image_from_data(
                f, repository=repo, tag=tag,
                changes=["ENV PATH=/usr/local/bin:/usr/bin:/bin", "ENV LANG=C.UTF-8", "WORKDIR /workspace",
                         'CMD ["python3"]'])
    # Podman 4.3 ignores the tag of an import (it tags ":latest"): tag the id the answer names.
    image_id = json.loads(answer.strip().splitlines()[-1])["id"]
    image = client.images.get(image_id)
    image.tag(repo, tag)
    return {"ref": ref, "id": image.id, "imported": True, "rootfs_seconds": round(t1 - t0, 1),
            "import_seconds": round(time.monotonic() - t1, 1), **stats}
