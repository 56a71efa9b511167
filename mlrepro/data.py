"""Generated datasets: written once into a folder with a sha256 manifest that every reader verifies.

The manifest is in ``sha256sum`` format, so ``sha256sum -c MANIFEST.sha256`` checks it by hand too.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrepro.atomic import atomic_dir
from mlrepro.workload import load_module

MANIFEST = "MANIFEST.sha256"


class DataChecksumError(RuntimeError):
    pass


@dataclass(frozen=True)
class Mismatch:
    file: Path
    problem: str


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def generate(benchmark: str, out_dir: Path, params: dict[str, Any], seed: int) -> dict[str, str]:
    """Generate ``benchmark``'s dataset into ``out_dir`` (replaced only when complete); return its manifest."""
    module = load_module(benchmark)
    with atomic_dir(out_dir) as tmp:
        module.generate_data(tmp, params, seed)
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        if not files:
            raise RuntimeError(f"workflows/{benchmark}/model.py: generate_data wrote no files")
        manifest = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in files}
        (tmp / MANIFEST).write_text("".join(f"{h}  {name}\n" for name, h in manifest.items()))
    return manifest


def read_manifest(data_dir: Path) -> dict[str, str]:
    path = data_dir / MANIFEST
    entries: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise DataChecksumError(f"{path}:{n}: not a sha256sum line: {line!r}")
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


def rebuild(benchmark: str, out_dir: Path, params: dict[str, Any], seed: int) -> None:
    """Regenerate a dataset that fails its manifest; keep the manifest's time stamp when it matches again."""
    manifest = out_dir / MANIFEST
    before = read_manifest(out_dir)
    stamp = manifest.stat()
    if generate(benchmark, out_dir, params, seed) == before:
        os.utime(manifest, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m mlrepro.data", description=__doc__)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--params", required=True, help="JSON with the benchmark's 'data' block")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--receipt", type=Path, help="where to record the files' stamps (size, mtime, inode)")
    args = p.parse_args(argv)
    manifest = generate(args.benchmark, args.out, json.loads(args.params), args.seed)
    if args.receipt:
        from mlrepro.datasets.stamps import write_receipt

        write_receipt(args.receipt, args.out)
    for name, digest in manifest.items():
        print(f"{digest}  {name}")


if __name__ == "__main__":
    from mlrepro import warm

    warm.hand_over(warm.DATA)  # exits there where this invocation's warm parent generates the data
    main()
