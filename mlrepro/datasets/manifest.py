"""A dataset folder's sha256 manifest, as every reader verifies it (``sha256sum -c MANIFEST.sha256`` works too).

The training loop reads through this module only; writing a dataset is :mod:`mlrepro.datasets.generated`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mlrepro.core.errors import MlreproError
from mlrepro.core.hashing import sha256_file

MANIFEST = "MANIFEST.sha256"


class DataChecksumError(MlreproError, RuntimeError):
    pass


@dataclass(frozen=True)
class Mismatch:
    file: Path
    problem: str


def read_manifest(data_dir: Path) -> dict[str, str]:
    path = data_dir / MANIFEST
    entries: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise DataChecksumError(f"{path}:{n}: not a sha256sum line: {line!r}")
        if name in ("", ".") or name.startswith("/") or ".." in PurePosixPath(name).parts:
            raise DataChecksumError(f"{path}:{n}: {name!r} is not a file of {data_dir} (an absolute name, or one "
                                    "with ..): a manifest lists its folder's own files")
        entries[name] = digest
    return entries


def verify(data_dir: Path) -> list[Mismatch]:
    """Every problem with ``data_dir`` against its manifest; empty when the data is intact."""
    if not (data_dir / MANIFEST).is_file():
        return [Mismatch(data_dir / MANIFEST, "manifest is missing")]
    problems = []
    for name, digest in read_manifest(data_dir).items():
        path = data_dir / name
        if not path.is_file():
            problems.append(Mismatch(path, "listed in the manifest but missing"))
        elif (actual := sha256_file(path)) != digest:
            problems.append(Mismatch(path, f"sha256 is {actual}, the manifest says {digest}"))
    return problems


def require_valid(data_dir: Path) -> None:
    problems = verify(data_dir)
    if problems:
        lines = "; ".join(f"{p.file}: {p.problem}" for p in problems)
        raise DataChecksumError(
            f"dataset {data_dir} does not match {data_dir / MANIFEST}: {lines}. "
            "Re-run snakemake: it detects the mismatch and regenerates the dataset."
        )
