"""Verify a package against its provenance manifest (mlrepro/package/provenance.py); name exactly what differs.

Errors are evidence of tampering: the manifest's hash differs from its sidecar or from the hash
published in the report; a file edited, added or removed; a packaged result with no successful launch
in the ledger, or whose seed or run window differs from what was recorded when its run ended. Warnings:
a successful launch of the ledger whose result is not in the package (a run dropped or superseded by
a re-run), a tree with uncommitted changes. Notes: failed and aborted launches. A package without a
manifest is audited as before, with a note (an error when a hash was published for it).

The audit only reads the package.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.core import mllog_reader, safe_read
from mlrepro.package.provenance import MANIFEST, SIDECAR, UNHASHED, package_files

# A result's run window must lie within its launch (the ledger's times are the driver's, in seconds).
_SLACK_MS = 2000


@dataclass
class Finding:
    severity: str  # error | warning | note
    kind: str
    path: str
    message: str


@dataclass
class ManifestCheck:
    present: bool
    manifest_sha256: str | None = None
    findings: list[Finding] = field(default_factory=list)
    note: str = ""

    @property
    def verified(self) -> bool:
        return self.present and not any(f.severity == "error" for f in self.findings)

    def add(self, severity: str, kind: str, path: str, message: str) -> None:
        self.findings.append(Finding(severity, kind, path, message))

    def to_dict(self) -> dict[str, Any]:
        return {"present": self.present, "verified": self.verified, "manifest_sha256": self.manifest_sha256,
                "note": self.note, "findings": [vars(f) for f in self.findings]}


def _logged(path: Path) -> dict[str, Any]:
    """The seed and run window a result file logs (None where it does not)."""
    out: dict[str, Any] = {"seed": None, "run_start_ms": None, "run_stop_ms": None}
    try:
        for e in mllog_reader.events(path):
            if e.get("key") == "seed":
                out["seed"] = e.get("value")
            elif e.get("key") in ("run_start", "run_stop"):
                out[f"{e['key']}_ms"] = e.get("time_ms")
    except (OSError, ValueError, UnicodeDecodeError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def _check_hash(check: ManifestCheck, org_dir: Path, data: bytes, expected: str | None) -> None:
    digest = check.manifest_sha256 = hashlib.sha256(data).hexdigest()
    sidecar = org_dir / SIDECAR
    if not sidecar.is_file():
        check.add("error", "manifest hash missing", SIDECAR,
                  f"{SIDECAR} is missing: the manifest's own hash cannot be checked inside the package")
    else:
        recorded = sidecar.read_text(errors="replace").split(maxsplit=1)[0] if sidecar.stat().st_size else ""
        if recorded != digest:
            check.add("error", "manifest edited", MANIFEST,
                      f"{MANIFEST} has sha256 {digest}, but {SIDECAR} records {recorded[:64]!r}: the manifest was "
                      "edited after it was written, without updating its hash")
    if expected and expected.lower() != digest:
        check.add("error", "manifest differs from the published hash", MANIFEST,
                  f"{MANIFEST} has sha256 {digest}, but the report that came with the package published "
                  f"{expected}: manifest (and sidecar) replaced")


def _check_files(check: ManifestCheck, org_dir: Path, recorded: dict[str, str], max_bytes: int | None
                 ) -> dict[str, str]:
    """Compare the package's files with the manifest's; return the package's (path -> sha256)."""
    present = package_files(org_dir, max_bytes)
    for rel in sorted(k for k, v in present.items() if v.startswith(UNHASHED)):
        check.add("error", "file too large to verify", rel, f"{rel}: {present[rel].removeprefix(UNHASHED)}, over "
                  f"the limit of {max_bytes} (raise it with audit_max_file_mb); not hashed, so not verified")
    for rel in sorted(recorded.keys() - present.keys()):
        check.add("error", "file removed", rel, f"{rel} is in the manifest but not in the package (removed)")
    for rel in sorted(present.keys() - recorded.keys()):
        check.add("error", "file added", rel, f"{rel} is in the package but not in the manifest (added)")
    for rel in sorted(k for k in recorded.keys() & present.keys()
                      if recorded[k] != present[k] and not present[k].startswith(UNHASHED)):
        if rel.startswith("systems/") and rel.endswith(".json"):
            kind, what = "system description changed", "the system description"
        elif rel.startswith("results/"):
            kind, what = "result edited", "the result file"
        else:
            kind, what = "file edited", "the file"
        check.add("error", kind, rel, f"{what} {rel} changed: sha256 {present[rel]}, the manifest records "
                  f"{recorded[rel]}")
    return present


def _check_runs(check: ManifestCheck, org_dir: Path, manifest: dict[str, Any], present: dict[str, str]) -> None:
    ledger = {r.get("launch"): r for r in manifest.get("ledger") or []}
    used = set()
    for run in manifest.get("runs") or []:
        rel = str(run.get("file"))
        launch = ledger.get(run.get("launch"))
        if launch is None:
            check.add("error", "run missing from the ledger", rel,
                      f"{rel} (seed {run.get('seed')}): no launch in the ledger wrote it (launch "
                      f"{run.get('launch')})")
        else:
            used.add(run.get("launch"))
            if launch.get("status") != "success" or launch.get("result_sha256") != run.get("result_sha256"):
                check.add("error", "result does not match the ledger", rel,
                          f"{rel}: the ledger's launch {launch.get('launch')} ended {launch.get('status')!r} "
                          f"with result sha256 {launch.get('result_sha256')}, the run record says "
                          f"{run.get('result_sha256')}")
            if launch.get("seed") != run.get("seed"):
                check.add("error", "seed differs from the ledger", rel,
                          f"{rel}: seed {run.get('seed')} recorded for the result, {launch.get('seed')} in the ledger")
        if not present.get(rel, "symlink:").isalnum():  # never read a path a manifest names outside the package
            if rel not in (manifest.get("files") or {}):  # else named above as removed
                check.add("error", "result missing", rel, f"the manifest's run record names {rel!r}, which is not "
                          "a regular file of the package")
            continue
        path = org_dir / rel
        logged = _logged(path)
        if "error" in logged:
            check.add("error", "result unreadable", rel, f"{rel}: {logged['error']}")
            continue
        if logged["seed"] != run.get("seed"):
            check.add("error", "seed differs from the ledger", rel,
                      f"{rel}: the file logs seed {logged['seed']}, the run was launched with {run.get('seed')}")
        for key in ("run_start_ms", "run_stop_ms"):
            if logged[key] != run.get(key):
                check.add("error", "time differs from the ledger", rel,
                          f"{rel}: {key.removesuffix('_ms')} time_ms is {logged[key]} in the file, "
                          f"{run.get(key)} when the run ended")
        if launch is not None and launch.get("start") is not None and launch.get("stop") is not None:
            lo, hi = launch["start"] * 1000 - _SLACK_MS, launch["stop"] * 1000 + _SLACK_MS
            outside = [k for k in ("run_start_ms", "run_stop_ms")
                       if isinstance(logged[k], int | float) and not lo <= logged[k] <= hi]
            if outside:
                check.add("error", "time differs from the ledger", rel,
                          f"{rel}: {' and '.join(k.removesuffix('_ms') for k in outside)} lie outside its launch "
                          f"({launch['start']:.0f} to {launch['stop']:.0f} s since the epoch)")
    outside = _check_selections(check, manifest, ledger)
    for launch_id, rec in ledger.items():
        where = f"{rec.get('run_dir')} launch {launch_id} (seed {rec.get('seed')}, slurm job {rec.get('slurm_job_id')})"
        if launch_id in used:
            continue
        if rec.get("status") == "success" and _unit_key(rec.get("run_dir")) in outside:
            check.add("note", "run outside the chosen window", str(rec.get("run_dir")),
                      f"{where} succeeded; one of the runs launched, outside the median window the package holds")
        elif rec.get("status") == "success":
            check.add("warning", "ledger run not in the package", str(rec.get("run_dir")),
                      f"{where} succeeded, but its result is not in the package (dropped, or superseded by a re-run)")
        else:
            check.add("note", "failed or aborted launch", str(rec.get("run_dir")),
                      f"{where} ended {rec.get('status')!r} (exit status {rec.get('exit_status')})")


def _unit_key(run_dir: Any) -> tuple[str, str, str]:
    """(system, benchmark, run folder) of a ledger's or run record's run_dir (runs/<system>/<benchmark>/<i>)."""
    parts = Path(str(run_dir)).parts
    return (parts[-3], parts[-2], parts[-1]) if len(parts) >= 3 else ("", "", str(run_dir))


def _check_selections(check: ManifestCheck, manifest: dict[str, Any], ledger: dict[Any, dict[str, Any]]
                      ) -> set[tuple[str, str, str]]:
    """A package of M > N runs against its ledger: every launched run is in the selection, within its launch,
    the chosen window is the median one of the selection's runs, and the package holds exactly that window.
    Returns the (system, benchmark, run) launched and left outside the window."""
    from mlrepro.core import median_window
    from mlrepro.core.olympic import olympic_mean

    outside: set[tuple[str, str, str]] = set()
    selections = manifest.get("selections") or {}
    if not isinstance(selections, dict):
        check.add("error", "selection unreadable", MANIFEST, "the manifest's selections are not an object")
        return outside
    packaged: dict[tuple[str, str], list[str]] = {}
    records: dict[tuple[str, str, str], dict[str, Any]] = {}
    for run in manifest.get("runs") or []:
        system, benchmark, key = _unit_key(run.get("run_dir"))
        packaged.setdefault((system, benchmark), []).append(key)
        records[system, benchmark, key] = run
    for system, benchmarks in selections.items():
        for benchmark, sel in (benchmarks or {}).items():
            where = f"results/{system}/{benchmark}"
            try:
                runs = {str(r["key"]): r for r in sel["runs"]}
                again = median_window.choose(list(runs.values()), int(sel["kept"]),
                                             lambda minutes, b=benchmark: olympic_mean(b, minutes).minutes)
            except (KeyError, TypeError, ValueError) as e:
                check.add("error", "selection unreadable", where, f"{where}: the selection cannot be read: {e}")
                continue
            launches = [r for r in ledger.values() if _unit_key(r.get("run_dir"))[:2] == (system, benchmark)]
            for rec in launches:
                key = _unit_key(rec.get("run_dir"))[2]
                if rec.get("status") == "success" and key not in runs:
                    check.add("error", "launched run left out of the selection", where,
                              f"{where}: run {key} of the ledger succeeded, but the median window was chosen "
                              f"without it (of {sorted(runs)})")
            _check_within_launches(check, where, runs, launches)
            _check_counts(check, where, manifest, benchmark, runs, launches)
            for key, run in runs.items():  # a packaged run's record says what its result file logs
                rec = records.get((system, benchmark, key))
                if rec is not None and run.get("run_start_ms") != rec.get("run_start_ms"):
                    check.add("error", "time differs from the ledger", where,
                              f"{where}: run {key} starts at {run.get('run_start_ms')} ms in the selection, at "
                              f"{rec.get('run_start_ms')} ms in its packaged result")
            if again["chosen_keys"] != sel.get("chosen_keys"):
                check.add("error", "chosen window is not the median one", where,
                          f"{where}: the package's window is runs {sel.get('chosen_keys')}, but the median window "
                          f"of the {len(runs)} runs launched is {again['chosen_keys']} ({median_window.RULE})")
            if packaged.get((system, benchmark)) != again["chosen_keys"]:
                check.add("error", "package differs from its chosen window", where,
                          f"{where}: the package holds runs {packaged.get((system, benchmark))}, its median window "
                          f"is {again['chosen_keys']}")
            outside |= {(system, benchmark, k) for k in runs if k not in again["chosen_keys"]}
    return outside


def _check_counts(check: ManifestCheck, where: str, manifest: dict[str, Any], benchmark: str,
                  runs: dict[str, dict[str, Any]], launches: list[dict[str, Any]]) -> None:
    """M > N: the config's runs_to_run (M), the selection's runs and the ledger's run folders agree: runs 0 to M-1,
    each launched. A package rewritten whole could agree with itself; only its published hash binds it (docs)."""
    block = ((manifest.get("config") or {}).get("benchmarks") or {}).get(benchmark) or {}
    m = block.get("runs_to_run") if isinstance(block, dict) else None
    if not isinstance(m, int) or isinstance(m, bool):
        check.add("error", "runs_to_run unknown", where, f"{where}: the manifest's config records no runs_to_run "
                  "for a package holding a median window, so the count of runs launched cannot be checked")
        return
    expected = {str(i) for i in range(m)}
    launched = {_unit_key(r.get("run_dir"))[2] for r in launches}
    if set(runs) != expected:
        check.add("error", "selection differs from runs_to_run", where,
                  f"{where}: runs_to_run is {m} (runs 0 to {m - 1}), the selection holds runs {sorted(runs)}")
    if launched - expected or expected - launched:
        check.add("error", "ledger differs from runs_to_run", where,
                  f"{where}: runs_to_run is {m}, the ledger launched run folders {sorted(launched)}: "
                  + "; ".join(filter(None, [f"missing {sorted(expected - launched)}" if expected - launched else "",
                                            f"beyond {sorted(launched - expected)}" if launched - expected else ""])))


def _check_within_launches(check: ManifestCheck, where: str, runs: dict[str, dict[str, Any]],
                           launches: list[dict[str, Any]]) -> None:
    """Each run's recorded start and time to train lie within its ledger launch (the driver's clock, seconds)."""
    by_key = {_unit_key(r.get("run_dir"))[2]: r for r in launches if r.get("status") == "success"}
    for key, run in runs.items():
        launch = by_key.get(key)
        if launch is None:
            check.add("error", "selection run missing from the ledger", where,
                      f"{where}: run {key} of the selection has no successful launch in the ledger")
            continue
        start, minutes = run.get("run_start_ms"), run.get("minutes")
        if launch.get("start") is None or launch.get("stop") is None or not isinstance(start, int | float):
            continue
        lo, hi = launch["start"] * 1000 - _SLACK_MS, launch["stop"] * 1000 + _SLACK_MS
        end = start + (minutes or 0) * 60_000
        if not (lo <= start and end <= hi):
            check.add("error", "time differs from the ledger", where,
                      f"{where}: run {key}'s recorded run (start {start:.0f} ms, {minutes} min) lies outside its "
                      f"launch ({launch['start']:.0f} to {launch['stop']:.0f} s since the epoch)")


def verify(org_dir: Path, expected_sha256: str | None = None,
           max_bytes: int | None = safe_read.DEFAULT_MAX_BYTES) -> ManifestCheck:
    """Check the package ``org_dir`` against its manifest; ``expected_sha256``: the hash published
    with the package (its report), when the auditor has it; ``max_bytes``: the largest file read or hashed."""
    path = org_dir / MANIFEST
    if not os.path.lexists(path):
        missing = ManifestCheck(False, note=f"The package has no {MANIFEST}: audited as before, without provenance "
                                "checks (files, ledger, seeds and times cannot be verified).")
        if expected_sha256:  # deleting the manifest (and its sidecar) must not defeat the published hash
            missing.add("error", "manifest missing", MANIFEST,
                        f"the report that came with the package published the sha256 {expected_sha256} of its "
                        f"{MANIFEST}, but the package has none: the manifest was removed")
        return missing
    check = ManifestCheck(True)
    try:  # a link out of the package, a FIFO, a device or a huge file is a verdict, never read
        data = safe_read.read_bytes(path, org_dir, max_bytes)
    except safe_read.UnsafeInput as e:
        check.add("error", "manifest unreadable", MANIFEST, f"{MANIFEST} is not read: {e}")
        return check
    _check_hash(check, org_dir, data, expected_sha256)
    try:
        manifest = safe_read.loads_json(data, MANIFEST)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
            raise ValueError("not a manifest object with a 'files' map")
    except ValueError as e:  # UnsafeInput too: invalid, or nested too deep
        check.add("error", "manifest unreadable", MANIFEST, f"{MANIFEST} cannot be read: {e}")
        return check
    present = _check_files(check, org_dir, manifest["files"], max_bytes)
    _check_runs(check, org_dir, manifest, present)
    git = manifest.get("git") or {}
    if git.get("dirty"):
        changed = ", ".join(git.get("changed") or [])[:500]
        check.add("warning", "dirty tree", MANIFEST,
                  f"the package was made from commit {git.get('commit')} with uncommitted changes ({changed})")
    elif git.get("commit") is None:
        check.add("note", "no git commit", MANIFEST, f"no project commit recorded: {git.get('note')}")
    check.note = "verified against its manifest" if check.verified else "DOES NOT MATCH its manifest"
    return check
