"""What a package folder holds: organisations, their systems, benchmark folders and result files.

PATH is one organisation (it has ``results/``) or a round (organisations side by side). Listing
follows the official tools: sub-folders sorted, result files by the glob ``result_*.txt``.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class BenchmarkDir:
    name: str  # the folder name, as the package checker takes it
    path: Path
    result_files: list[Path]  # result_*.txt, sorted
    other_files: list[str]  # names of anything else in the folder


@dataclass
class SystemDir:
    name: str  # the folder name under results/
    path: Path
    benchmarks: list[BenchmarkDir]


@dataclass
class Org:
    name: str
    path: Path
    systems: list[SystemDir]
    system_jsons: list[Path]  # systems/*.json
    problems: list[str] = field(default_factory=list)  # layout problems found while listing


def _sub_folders(folder: Path) -> list[Path]:
    try:
        return [p for p in sorted(folder.iterdir()) if p.is_dir()]
    except OSError:
        return []


def _benchmark_dir(path: Path) -> BenchmarkDir:
    # glob.glob, not Path.glob: the same pattern semantics (hidden files excluded) as the tools
    results = sorted(Path(p) for p in glob.glob(os.path.join(glob.escape(str(path)), "result_*.txt")))
    names = {p.name for p in results}
    others = sorted(p.name for p in path.iterdir() if p.name not in names)
    return BenchmarkDir(path.name, path, results, others)


def is_org(folder: Path) -> bool:
    return (folder / "results").is_dir()


def find_orgs(root: Path) -> list[Org]:
    """The organisations under ``root`` (``root`` itself when it is one)."""
    candidates = [root] if is_org(root) else [p for p in _sub_folders(root) if is_org(p)]
    orgs = []
    for folder in candidates:
        org = Org(folder.name, folder, [], sorted(Path(p) for p in glob.glob(
            os.path.join(glob.escape(str(folder / "systems")), "*.json"))))
        if not (folder / "systems").is_dir():
            org.problems.append("The package has no systems/ folder.")
        for system in _sub_folders(folder / "results"):
            org.systems.append(SystemDir(system.name, system, [_benchmark_dir(b) for b in _sub_folders(system)]))
        if not org.systems:
            org.problems.append("results/ holds no system folder.")
        orgs.append(org)
    return orgs


def input_files(root: Path) -> list[str]:
    """Every file of the package (what the audit depends on), for Snakemake's inputs."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        out.extend(os.path.join(dirpath, name) for name in sorted(filenames))
    return out


def result_files(orgs: list[Org]) -> list[str]:
    return [str(f) for org in orgs for s in org.systems for b in s.benchmarks for f in b.result_files]
