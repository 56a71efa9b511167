"""Start-up with stamps vs a full hash, verify_data's hashing throughput, download throughput.

Usage: python benchmarks/dataset_speed.py [--gb 5] [--repeat 3] [--workdir DIR] [--drop-caches]

Makes a prepared dataset of about --gb GB (256 MB files of pseudo-random bytes) with its manifest,
adopts it as `data: {path: DIR}` (one full hash), then reports the median of --repeat runs of:
`snakemake -n` (the start: stamps only); a full hash of the folder as the start did before
(mlrepro.datasets.manifest.verify, serial); `snakemake verify_data` (parallel hashing, all cores); and the download
of a 1 GB file from a local HTTP server through the recipe's downloader (pooch, md5 checked).
--drop-caches (root) empties the page cache before each hash, for cold-cache figures. Deletes its data.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mlrepro import data  # noqa: E402
from mlrepro.datasets import fetch, recipe, stamps  # noqa: E402

FILE = 256 << 20


def drop_caches(enabled: bool) -> None:
    if enabled:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def snakemake(workdir: Path, config: Path, *args: str) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "snakemake", *args, "--snakefile", str(REPO / "Snakefile"),
                          "--directory", str(workdir), "--cores", str(os.cpu_count()), "--configfile", str(config)],
                         capture_output=True, text=True, cwd=REPO, check=True)
    return time.perf_counter() - start, out.stdout + out.stderr


def make_dataset(folder: Path, gb: float) -> int:
    folder.mkdir(parents=True)
    block = os.urandom(1 << 20)
    n = max(1, round(gb * 1e9 / FILE))
    for i in range(n):
        with (folder / f"part-{i:04d}.bin").open("wb") as f:
            for j in range(FILE >> 20):
                f.write(hashlib.sha256(f"{i}/{j}".encode()).digest() + block[32:])
    stamps.write_manifest(folder)
    return n * FILE


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s (runs: {', '.join(f'{v:.2f}' for v in values)})"


def download_throughput(tmp: Path, repeat: int) -> list[float]:
    served = tmp / "served"
    served.mkdir()
    payload = served / "big.bin"
    shutil.copyfile(next((tmp / "prepared").glob("part-*.bin")), payload)
    with payload.open("ab") as f:  # 1 GB
        for _ in range(3):
            f.write((tmp / "prepared" / "part-0000.bin").read_bytes())
    md5 = hashlib.md5(payload.read_bytes()).hexdigest()
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(served)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    path = tmp / "recipe.yaml"
    path.write_text(yaml.safe_dump({"sources": [{"file": "big.bin", "hash": f"md5:{md5}",
                                                 "url": f"http://127.0.0.1:{httpd.server_address[1]}/big.bin"}]}))
    r = recipe.load("minigo", path)
    rates = []
    for i in range(repeat):
        downloads = tmp / f"downloads-{i}"
        start = time.perf_counter()
        fetch.download(r, tmp, downloads, progressbar=False)
        rates.append(payload.stat().st_size / 1e6 / (time.perf_counter() - start))
        shutil.rmtree(downloads)
    httpd.shutdown()
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gb", type=float, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--drop-caches", action="store_true")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dataset-speed-", dir=args.workdir))
    try:
        start = time.perf_counter()
        size = make_dataset(tmp / "prepared", args.gb)
        print(f"made {size / 1e9:.2f} GB in {len(list((tmp / 'prepared').glob('*.bin')))} files with its manifest "
              f"in {time.perf_counter() - start:.1f} s")
        config = tmp / "config.yaml"
        config.write_text(yaml.safe_dump({"only": ["resnet"], "benchmarks": {"resnet": {"data": {
            "path": str(tmp / "prepared")}}}}))
        work = tmp / "run"
        seconds, _ = snakemake(work, config, "datasets")
        print(f"adopting it (one full hash, snakemake datasets): {seconds:.2f} s")
        starts, hashes, verifies, rates = [], [], [], []
        for _ in range(args.repeat):
            starts.append(snakemake(work, config, "-n")[0])
            drop_caches(args.drop_caches)
            t = time.perf_counter()
            assert data.verify(tmp / "prepared") == []
            hashes.append(time.perf_counter() - t)
            drop_caches(args.drop_caches)
            seconds, out = snakemake(work, config, "verify_data")
            verifies.append(seconds)
            rates += [float(line.split("(")[1].split(" MB/s")[0]) for line in out.splitlines()
                      if line.startswith("verify_data: hashed")]
        print(f"snakemake -n, stamps only: {median(starts)}")
        print(f"a full hash of the folder, as the start did before (serial sha256): {median(hashes)} "
              f"= {size / 1e6 / statistics.median(hashes):.0f} MB/s")
        print(f"snakemake verify_data ({os.cpu_count()} threads), whole command: {median(verifies)}; "
              f"hashing alone: median {statistics.median(rates):.0f} MB/s")
        rates = download_throughput(tmp, args.repeat)
        print(f"download from 127.0.0.1 (1 GB, pooch + md5 check): median {statistics.median(rates):.0f} MB/s "
              f"(runs: {', '.join(f'{r:.0f}' for r in rates)})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
