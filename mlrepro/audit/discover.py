"""What a package folder holds: organisations, their systems, benchmark folders and result files.

PATH is one organisation (it has ``results/``) or a round (organisations side by side). Listing
follows the official tools: sub-folders sorted, result files by the glob ``result_*.txt``.

The audit reads regular files inside the organisation's folder only. Any other entry (a symlink
out of the package or dangling, a FIFO, a device, a file over the size limit) gets its own verdict
from :func:`entry_problem` and is never opened; symlinked folders are not followed.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

from mlrepro.core import safe_read
from mlrepro.core.errors import MlreproError

# Far above any real result log (those of a training round are a few MB at most); configurable
# with the audit's --max-file-mb (config key audit_max_file_mb).
DEFAULT_MAX_FILE_MB = 256


class EntryRejected(MlreproError, OSError):
    """An entry the audit does not read; the message is its verdict."""


def entry_problem(path: Path, root: Path, max_bytes: int | None = DEFAULT_MAX_FILE_MB << 20) -> str | None:
    """Why the audit does not read ``path`` (None: a regular file inside ``root``, within the limit)."""
    return safe_read.refusal(path, root, max_bytes, root_label="the package",
                             limit_hint=" (raise it with audit_max_file_mb)")


def read_entry(path: Path, root: Path, max_bytes: int | None = DEFAULT_MAX_FILE_MB << 20) -> bytes:
    """The bytes of a regular file inside ``root``; EntryRejected (with its verdict) for anything else."""
    if problem := entry_problem(path, root, max_bytes):
        raise EntryRejected(problem)
    try:
        return safe_read.read_bytes(path, root, max_bytes)
    except safe_read.UnsafeInput as e:  # swapped after the check (a FIFO, say): the verdict of what was opened
        raise EntryRejected(str(e).removeprefix(f"{path}: ")) from None


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


def _sub_folders(folder: Path, problems: list[str] | None = None, root: Path | None = None) -> list[Path]:
    """Real sub-folders; a symlinked folder is named in ``problems`` and not followed."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    out = []
    for p in entries:
        if p.is_symlink():
            if p.is_dir() and problems is not None:
                where = p.relative_to(root) if root else p
                inside = root is not None and Path(os.path.realpath(p)).is_relative_to(os.path.realpath(root))
                problems.append(f"{where}: " + ("symlinked folder, not followed" if inside else
                                                f"symlink out of the package (-> {os.readlink(p)}); not followed"))
            continue
        if p.is_dir():
            out.append(p)
    return out


def _benchmark_dir(path: Path) -> BenchmarkDir:
    # glob.glob, not Path.glob: the same pattern semantics (hidden files excluded) as the tools
    results = sorted(Path(p) for p in glob.glob(os.path.join(glob.escape(str(path)), "result_*.txt")))
    names = {p.name for p in results}
    others = sorted(p.name for p in path.iterdir() if p.name not in names)
    return BenchmarkDir(path.name, path, results, others)


def is_org(folder: Path) -> bool:
    return (folder / "results").is_dir()


def system_json_paths(org_folder: Path) -> list[Path]:
    """Every ``systems/*.json`` of an organisation, as the official tools list them, readable or not
    (none from a symlinked systems/ folder, which is not followed)."""
    if (org_folder / "systems").is_symlink():
        return []
    return sorted(Path(p) for p in glob.glob(os.path.join(glob.escape(str(org_folder / "systems")), "*.json")))


def find_orgs(root: Path) -> list[Org]:
    """The organisations under ``root`` (``root`` itself when it is one)."""
    candidates = [root] if is_org(root) else [p for p in _sub_folders(root) if is_org(p)]
    orgs = []
    for folder in candidates:
        org = Org(folder.name, folder, [], [])
        for p in system_json_paths(folder):
            if problem := entry_problem(p, root):
                org.problems.append(f"systems/{p.name}: {problem}")
            else:
                org.system_jsons.append(p)
        if not (folder / "systems").is_dir() or (folder / "systems").is_symlink():
            org.problems.append("The package has no systems/ folder.")
        results = folder / "results"
        if results.is_symlink():  # like any symlinked folder: named, not followed
            org.problems.append(f"results: a symlinked folder (-> {os.readlink(results)}); not followed")
        else:
            for system in _sub_folders(results, org.problems, root):
                org.systems.append(SystemDir(system.name, system,
                                             [_benchmark_dir(b) for b in _sub_folders(system, org.problems, root)]))
        if not org.systems:
            org.problems.append("results/ holds no system folder.")
        orgs.append(org)
    return orgs


def input_files(root: Path) -> list[str]:
    """Every file of the package the audit reads (what it depends on), for Snakemake's inputs."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        out.extend(path for name in sorted(filenames)
                   if entry_problem(Path(path := os.path.join(dirpath, name)), root, None) is None)
    return out


def rejected_entries(root: Path, max_bytes: int | None) -> list[str]:
    """'path: verdict' of every entry under ``root`` that the audit does not read."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + sorted(d for d in dirnames if os.path.islink(os.path.join(dirpath, d))):
            path = Path(dirpath, name)
            if not path.is_symlink() and path.is_dir():
                continue
            if problem := entry_problem(path, root, max_bytes):
                out.append(f"{path}: {problem}")
    return out


def result_files(orgs: list[Org]) -> list[str]:
    return [str(f) for org in orgs for s in org.systems for b in s.benchmarks for f in b.result_files]
