"""Generated datasets: each mini benchmark's generator, written once into a folder with its sha256 manifest
(:mod:`mlrepro.datasets.manifest`, which every reader verifies)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mlrepro.core.atomic import atomic_dir
from mlrepro.core.hashing import sha256_file
from mlrepro.core.job import Job
from mlrepro.core.minis import load_module
from mlrepro.datasets.manifest import MANIFEST, read_manifest


def generate(benchmark: str, out_dir: Path, params: dict[str, Any], seed: int) -> dict[str, str]:
    """Generate ``benchmark``'s dataset into ``out_dir`` (replaced only when complete); return its manifest."""
    module = load_module(benchmark)
    with atomic_dir(out_dir) as tmp:
        module.generate_data(tmp, params, seed)
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        if not files:
            raise RuntimeError(f"minis/{benchmark}/model.py: generate_data wrote no files")
        manifest = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in files}
        (tmp / MANIFEST).write_text("".join(f"{h}  {name}\n" for name, h in manifest.items()))
    return manifest


def rebuild(benchmark: str, out_dir: Path, params: dict[str, Any], seed: int) -> None:
    """Regenerate a dataset that fails its manifest; keep the manifest's time stamp when it matches again."""
    manifest = out_dir / MANIFEST
    before = read_manifest(out_dir)
    stamp = manifest.stat()
    if generate(benchmark, out_dir, params, seed) == before:
        os.utime(manifest, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


def job(job: Job) -> None:
    """rules/data.smk data: params folder, data (the generator block), seed, receipt (where the files' stamps are
    recorded). Served by this invocation's warm parent, which imported torch once (mlrepro/jobs.py)."""
    from mlrepro.datasets.stamps import write_receipt

    out = Path(job.params["folder"])
    manifest = generate(job.wildcards["benchmark"], out, job.params["data"], int(job.params["seed"]))
    write_receipt(Path(job.params["receipt"]), out)
    _print(manifest)


def _print(manifest: dict[str, str]) -> None:
    for name, digest in manifest.items():
        print(f"{digest}  {name}")


def main(argv: list[str] | None = None) -> None:
    """``python -m mlrepro.datasets.generated``: what a reproduced package's data step runs (in its image, or with
    its staged copy first on the path: mlrepro/reproduce/)."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m mlrepro.datasets.generated", description=__doc__)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--params", required=True, help="the benchmark's 'data' block, as JSON")
    p.add_argument("--seed", type=int, required=True)
    args = p.parse_args(argv)
    _print(generate(args.benchmark, args.out, json.loads(args.params), args.seed))


if __name__ == "__main__":
    from mlrepro.runs import warm
    warm.hand_over(warm.DATA)  # exits there where this invocation's warm parent generates the data
    main()
