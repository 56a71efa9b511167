"""The public Training v1.1 round from ``../shared/data``, whole or as CI's sample of organisations.

The whole round against the official tools takes minutes per release on CI's two cores (the official tools
check every one of its 1,900 files): those tests carry the ``round`` mark and run with ``pytest -m round``.
The integration tier runs the same comparisons on SAMPLE, organisations chosen for what they hold: Baidu's
failing PaddlePaddle folder, scores the RCP check scales, one-file-per-run benchmarks of every kind.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

# ../shared/data beside the repository; MLREPRO_SHARED_DATA names it where the checkout lies elsewhere
DATA = Path(os.environ.get("MLREPRO_SHARED_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
V11 = DATA / "mlperf_training_results_v1.1.tar.xz"
SAMPLE = ("Baidu", "Fujitsu", "Google", "HPE", "Samsung")


def extract(archive: Path, dest: Path, orgs: tuple[str, ...] | None = None) -> Path:
    """``archive`` unpacked into ``dest`` (only ``orgs``' folders when given); ``dest``."""
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if orgs is None or Path(m.name).parts[:1] in [(o,) for o in orgs]]
        tar.extractall(dest, members=members, filter="data")
    return dest


def extract_systems(archive: Path, dest: Path, folders: tuple[str, ...]) -> Path:
    """The benchmark folders ``folders`` ("<org>/<system>/<benchmark>") of ``archive`` with their system JSONs,
    unpacked into ``dest``; ``dest``."""
    wanted = set()
    for folder in folders:
        org, system, benchmark = folder.split("/")
        wanted |= {(org, "results", system, benchmark), (org, "systems", f"{system}.json")}
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if Path(m.name).parts[:4] in wanted or Path(m.name).parts[:3] in wanted]
        tar.extractall(dest, members=members, filter="data")
    return dest
