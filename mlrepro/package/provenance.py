"""The provenance manifest of a submission package: what made it, and every run launched for it.

``<org>/provenance.json`` sits beside ``systems/`` (the official package checker reads only
``systems/``, ``results/`` and ``benchmarks/``). It holds the sha256 of every other file of the package,
the images the runs used, the hashes of the dataset manifests, the project's git commit and whether the
tree was dirty, the configuration and its hash, one record per packaged result (seed, run window, hash,
the ledger launch that wrote it) and the run ledger: every launch of every run of the packaged
benchmarks (mlrepro/runs/ledger.py), failed, aborted and superseded ones included.

The manifest is written last and hashed; the hash goes into ``<org>/provenance.sha256`` (sha256sum
format) and, outside the package, into the package verdict and the report. The sidecar catches a
manifest edited by someone who forgot to update it; a manifest and sidecar edited together are caught
only against the hash published outside the package (the report), which the audit takes as
``manifest_sha256``. mlrepro/audit/manifest.py verifies a package against its manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from mlrepro import PACKAGE_ROOT
from mlrepro.core import atomic, rulesets
from mlrepro.core.hashing import sha256_file
from mlrepro.runs import ledger

MANIFEST = "provenance.json"
SIDECAR = "provenance.sha256"
FORMAT = 1


UNHASHED = "not hashed: "  # a file over the reader's size limit: its size instead of its hash


def package_files(org_dir: Path, max_bytes: int | None = None) -> dict[str, str]:
    """Relative path -> sha256 of every file of the package but the manifest and its sidecar.
    Symlinks are recorded by their target text, never followed; a file over ``max_bytes`` (an auditor's bound:
    a hostile package may hold a sparse terabyte) by :data:`UNHASHED` and its size, never read."""
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(org_dir):
        dirnames.sort()
        for name in sorted(filenames) + sorted(d for d in dirnames if os.path.islink(os.path.join(dirpath, d))):
            path = Path(dirpath) / name
            rel = path.relative_to(org_dir).as_posix()
            if rel in (MANIFEST, SIDECAR):
                continue
            if path.is_symlink():
                files[rel] = "symlink:" + os.readlink(path)
            elif path.is_file():
                size = path.stat().st_size
                files[rel] = f"{UNHASHED}{size} bytes" if max_bytes is not None and size > max_bytes \
                    else sha256_file(path)
    return files


def git_state(repo: Path) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
        except OSError:
            return None
        return out.stdout if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "note": f"{repo} is not a git checkout"}
    changed = (git("status", "--porcelain") or "").splitlines()
    return {"commit": commit.strip(), "dirty": bool(changed), "changed": changed[:50]}


def _ledger(outdir: Path, runs_of: Path) -> list[dict[str, Any]]:
    """Every launch in the run folders of one (system, benchmark) (``runs_of``: their parent)."""
    records = []
    for path in sorted(runs_of.glob(f"*/{ledger.LEDGER}"),
                       key=lambda p: (len(p.parent.name), p.parent.name)):
        for rec in ledger.read(path):
            records.append({**rec, "run_dir": path.parent.relative_to(outdir).as_posix()})
    return records


def _run_record(system: str, benchmark: str, index: int, result_rel: str, run_dir: Path, outdir: Path,
                launches: list[dict[str, Any]]) -> dict[str, Any]:
    summary = json.loads((run_dir / "run.json").read_text())
    sha = sha256_file(run_dir / ledger.RESULT)
    rel_dir = run_dir.relative_to(outdir).as_posix()
    # The launch that wrote this result: the last successful one of the folder with the same hash.
    writers = [r for r in launches
               if r["run_dir"] == rel_dir and r["status"] == "success" and r["result_sha256"] == sha]
    return {"system": system, "benchmark": benchmark, "index": index, "file": result_rel, "run_dir": rel_dir,
            "seed": summary.get("seed"), "run_start_ms": summary.get("run_start_ms"),
            "run_stop_ms": summary.get("run_stop_ms"), "result_sha256": sha,
            "launch": writers[-1]["launch"] if writers else None, "image": summary.get("image"),
            "engine": summary.get("engine")}


def build(org_dir: Path, *, ruleset: str, outdir: Path, config: dict[str, Any], config_hash: str,
          runs: dict[str, dict[str, list[str]]], data_manifests: dict[str, str], repo: Path,
          selections: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The manifest of the assembled package ``org_dir``; ``runs`` maps system -> benchmark -> run folders in
    package order, ``data_manifests`` benchmark -> its dataset's MANIFEST.sha256; ``repo`` the checkout the
    Snakefile runs from (its git state is the package's; an mlrepro imported from another tree is named too);
    ``selections`` system -> benchmark -> the median window chosen of more runs (core/median_window.py), keyed
    by run folder: the ledger holds every launched run, the manifest says which window was packaged."""
    outdir = outdir.resolve()
    run_records, ledgers, images = [], [], {}
    for system, benchmarks in runs.items():
        for benchmark, run_dirs in benchmarks.items():
            launches = _ledger(outdir, Path(run_dirs[0]).resolve().parent) if run_dirs else []
            ledgers.extend(launches)
            for i, folder in enumerate(run_dirs):
                rel = f"results/{system}/{benchmark}/{rulesets.result_filename(benchmark, i, ruleset)}"
                rec = _run_record(system, benchmark, i, rel, Path(folder).resolve(), outdir, launches)
                run_records.append(rec)
                if rec["image"]:
                    images[json.dumps(rec["image"], sort_keys=True)] = rec["image"]
    config_text = json.dumps(config, sort_keys=True, default=str)
    return {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": package_files(org_dir),
        "images": list(images.values()),
        "engines": sorted({str(r["engine"]) for r in run_records}),
        "datasets": {b: {"manifest": os.path.relpath(Path(p).resolve(), outdir), "sha256": sha256_file(Path(p)),
                         "files": len(Path(p).read_text().splitlines())} for b, p in sorted(data_manifests.items())},
        "git": _code_state(repo),
        "config": config,
        "config_hash": config_hash,
        "config_sha256": hashlib.sha256(config_text.encode()).hexdigest(),
        "runs": run_records,
        "ledger": ledgers,
        "selections": selections or {},
    }


def _code_state(repo: Path) -> dict[str, Any]:
    state = git_state(repo)
    if PACKAGE_ROOT.resolve() != repo.resolve():  # the Python package was imported from another tree (installed)
        state["imported_package"] = {"path": str(PACKAGE_ROOT), **git_state(PACKAGE_ROOT)}
    return state


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n").encode()


def write(org_dir: Path, manifest: dict[str, Any]) -> str:
    """Write the manifest, then its hash beside it (last); return the hash."""
    data = manifest_bytes(manifest)
    digest = hashlib.sha256(data).hexdigest()
    atomic.write_bytes(org_dir / MANIFEST, data)
    atomic.write_text(org_dir / SIDECAR, f"{digest}  {MANIFEST}\n")
    return digest


def write_for_package(org_dir: Path, spec: dict[str, Any], provenance: dict[str, Any]) -> str:
    """The package step's hook: ``spec`` is the package spec, ``provenance`` its "provenance" part."""
    manifest = build(org_dir, ruleset=spec["ruleset"], outdir=Path(provenance["outdir"]),
                     config=provenance["config"], config_hash=provenance["config_hash"],
                     runs={s: {b: [str(Path(f).parent) for f in files] for b, files in benchmarks.items()}
                           for s, benchmarks in spec["runs"].items()},
                     data_manifests=provenance["data_manifests"], repo=Path(provenance["repo"]),
                     selections=spec.get("selections"))
    return write(org_dir, manifest)
