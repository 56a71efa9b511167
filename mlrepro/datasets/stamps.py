"""Manifests hashed once, stamps checked on every start, and the explicit parallel re-verification.

A stamp is (size, mtime_ns, inode) of a file: a file rewritten in place, replaced or touched changes it,
so an ordinary start compares stamps and hashes nothing; ``verify`` hashes every byte.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.job import Job
from mlrepro.datasets.manifest import MANIFEST, read_manifest

Stamp = tuple[int, int, int]


@dataclass(frozen=True)
class Problem:
    file: Path
    problem: str

    def __str__(self) -> str:
        return f"{self.file}: {self.problem}"


def stamp(path: Path) -> Stamp:
    st = path.stat()
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def hash_file(path: Path, algorithms: Iterable[str] = ("sha256",), chunk: int = 1 << 22) -> dict[str, str]:
    """Every digest of ``path`` in one pass (hashlib releases the GIL, so threads hash in parallel)."""
    hashers = {a: hashlib.new(a) for a in algorithms}
    with path.open("rb") as f:
        while block := f.read(chunk):
            for h in hashers.values():
                h.update(block)
    return {a: h.hexdigest() for a, h in hashers.items()}


def write_manifest(folder: Path, names: Iterable[str] | None = None, digests: dict[str, str] | None = None) -> None:
    """``folder/MANIFEST.sha256`` over ``names`` (default: every file below it), hashing what ``digests`` lacks."""
    if names is None:
        names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                       if p.is_file() and p.name != MANIFEST and not p.name.startswith("."))
    known = digests or {}
    lines = [f"{known.get(n) or hash_file(folder / n)['sha256']}  {n}\n" for n in sorted(names)]
    atomic.write_text(folder / MANIFEST, "".join(lines))


def folder_stamps(folder: Path) -> dict[str, Stamp]:
    names = [*read_manifest(folder), MANIFEST]
    return {n: stamp(folder / n) for n in names}


def write_receipt(path: Path, folder: Path, **extra: Any) -> None:
    """The pipeline's record that ``folder`` was made or verified, with the stamps of its files then.
    A receipt kept inside its folder also records the folder relative to itself (``within``)."""
    stamps = {n: list(s) for n, s in folder_stamps(folder).items()}
    within = ({"within": os.path.relpath(folder.resolve(), path.parent.resolve())}
              if path.parent.resolve().is_relative_to(folder.resolve()) else {})
    atomic.write_json(path, {"folder": str(folder.resolve()), **within, "stamps": stamps, **extra})


def read_receipt(path: Path) -> dict[str, Any]:
    """The receipt; its ``folder`` is where the files are now when it lives inside them: a copied or moved
    output folder is checked itself, not the folder it was copied from."""
    receipt = json.loads(path.read_text())
    if "within" in receipt:
        receipt["folder"] = str((path.parent / receipt["within"]).resolve())
    return receipt


def changed_files(receipt: dict[str, Any]) -> list[Problem]:
    """The files whose stamp differs from the receipt's: costs one stat per file, hashes nothing."""
    folder = Path(receipt["folder"])
    problems = []
    for name, recorded in receipt["stamps"].items():
        path = folder / name
        try:
            now = stamp(path)
        except FileNotFoundError:
            problems.append(Problem(path, "missing"))
            continue
        if list(now) != list(recorded):
            what = "size" if now[0] != recorded[0] else "inode" if now[2] != recorded[2] else "modification time"
            problems.append(Problem(path, f"changed since it was verified ({what} differs)"))
    return problems


def verify_folders(folders: list[Path], jobs: int = os.cpu_count() or 1,
                   progress: bool = True) -> tuple[list[Problem], int]:
    """Hash every file of each folder's manifest in parallel; every mismatch, and the bytes hashed."""
    from tqdm import tqdm

    problems: list[Problem] = []
    work: list[tuple[Path, str]] = []
    for folder in folders:
        if not (folder / MANIFEST).is_file():
            problems.append(Problem(folder / MANIFEST, "manifest is missing"))
            continue
        for name, digest in read_manifest(folder).items():
            path = folder / name
            if not path.is_file():
                problems.append(Problem(path, f"listed in {folder / MANIFEST} but missing"))
            else:
                work.append((path, digest))
    total = sum(p.stat().st_size for p, _ in work)
    with tqdm(total=total, unit="B", unit_scale=True, desc="verify_data", disable=not progress) as bar:

        def check(item: tuple[Path, str]) -> Problem | None:
            path, expected = item
            actual = hash_file(path)["sha256"]
            bar.update(path.stat().st_size)
            if actual != expected:
                return Problem(path, f"sha256 is {actual}, the manifest says {expected}")
            return None

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            problems += [p for p in pool.map(check, work) if p]
    return problems, total


def verify_job(job: Job) -> None:
    """rules/data.smk verify_data: hash every file the receipts (params receipts) name, in job.threads threads;
    refresh the stamps of folders that match; name every mismatch (exit 1)."""
    import sys
    import time

    present = [Path(r) for r in job.params["receipts"] if Path(r).is_file()]
    folders = [Path(read_receipt(r)["folder"]) for r in present]
    start = time.monotonic()
    problems, total = verify_folders(folders, jobs=job.threads)
    seconds = time.monotonic() - start
    print(f"verify_data: hashed {total / 1e9:.3f} GB in {len(folders)} folders in {seconds:.2f} s "
          f"({total / 1e6 / max(seconds, 1e-9):.0f} MB/s, {job.threads} threads)")
    bad = {p.file.parent for p in problems}
    for receipt, folder in zip(present, folders, strict=True):
        if not any(folder == b or folder in b.parents for b in bad):
            extra = {k: v for k, v in read_receipt(receipt).items() if k not in ("folder", "stamps")}
            write_receipt(receipt, folder, **extra)  # intact: later starts compare with today's stamps
    for problem in problems:
        print(f"MISMATCH {problem}")
    if problems:
        sys.exit(f"verify_data: {len(problems)} files do not match their manifests")
    print("verify_data: every file matches its manifest")
