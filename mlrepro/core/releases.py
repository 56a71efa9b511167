"""The mlperf-logging release that judges a ruleset from 5.0.0 on: installed from PyPI by version with a pinned
hash, once per user, as a job (never while the DAG is built), and verified before every use.

``releases.yaml`` is the table: ruleset -> PyPI version, its wheel's sha256, the digest of its ``mlperf_logging/``
tree and what its ``benchmark_meta.py`` says of the ruleset (so a pipeline is planned before the release exists).
The release lives in ``$XDG_CACHE_HOME/mlrepro/releases/mlperf-logging-VERSION/`` (``~/.cache`` without it): a
folder of this user's with mode 0700 holding what ``pip install --target`` put there and :data:`MANIFEST` (the
sha256 of every file, written at install). The install job's output is the stamp beside it,
``mlperf-logging-VERSION.ok``; the steps the release judges take the stamp as an input and :func:`checked` verify
the folder before they use it: owner, mode, every file's hash, no file more, and the tree digest of the table.

Installing is race-safe: pip installs into a unique temporary folder beside the final one, which is renamed into
place in one step; a second pipeline that loses the race verifies and uses the winner's. The venv's own
mlperf-logging judges where it is exactly the pinned release (same version, same tree digest): the same files,
installed with the project, so nothing is installed or isolated twice
(:func:`mlrepro.core.release_table.judging_folder`).

``python -m mlrepro.core.releases install RULESET [--find-links DIR]`` installs by hand (``--find-links``: from a
folder of wheels, offline); ``list`` prints the table and what is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from mlrepro.core import atomic, private_dir, versions
from mlrepro.core import release_table as table
from mlrepro.core.errors import MlreproError
from mlrepro.core.release_table import MANIFEST, Pin, ReleaseError


# --- verification
def _walk(where: Path) -> dict[str, str]:
    """Every file below ``where`` (but the manifest and Python's own bytecode caches) -> its sha256; a link, a
    device or a FIFO is refused."""
    found: dict[str, str] = {}
    for top, dirs, files in os.walk(where):
        for name in dirs + files:
            path = Path(top, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                continue
            rel = path.relative_to(where).as_posix()
            if not stat.S_ISREG(mode):
                raise ReleaseError(f"{path}: not a regular file")
            # Python writes __pycache__/*.pyc beside the sources of whoever imports the folder by hand, and checks
            # each against its source's size and time; the sources themselves are hashed
            if rel == MANIFEST or (path.parent.name == "__pycache__" and name.endswith(".pyc")):
                continue
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _unsafe(where: Path, private: bool = True) -> str | None:
    """Why ``where`` may not hold a release (None: a folder of this user's, private; not ``private``: not writable
    by others)."""
    try:
        private_dir.check(where, private=private)
    except private_dir.PrivateDirError as e:
        return str(e).split(". mlrepro keeps", 1)[0]  # its advice is the runtime folders'
    return None


def problem(pin: Pin, where: Path) -> str | None:
    """Why the release installed at ``where`` cannot judge (None: it verifies)."""
    if unsafe := _unsafe(where.parent, private=False) or _unsafe(where):
        return unsafe
    try:
        recorded = json.loads((where / MANIFEST).read_text(encoding="utf-8"))["files"]
        if not isinstance(recorded, dict):
            raise TypeError("files: not a table")
        found = _walk(where)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"no readable manifest ({MANIFEST}: {e})"
    except ReleaseError as e:
        return str(e)
    changed = sorted(set(recorded) ^ set(found) | {f for f in found if recorded.get(f) != found[f]})
    if changed:
        return f"{len(changed)} file(s) differ from its manifest ({', '.join(changed[:3])})"
    if versions.describe(where).digest != pin.tree:
        return f"its mlperf_logging/ is not the pinned tree ({pin.tree[:16]}...)"
    return None


def verify(pin: Pin, where: Path | None = None) -> Path:
    """The installed release's folder (``where``, default its cache folder), verified (ReleaseError, saying what to
    do, where it is missing or fails)."""
    where = where if where is not None else table.folder(pin)
    if not os.path.lexists(where):
        raise ReleaseError(f"mlperf-logging {pin.version}, which judges ruleset {pin.ruleset}, is not installed "
                           f"({where}); install it with `{pin.command()}`")
    if why := problem(pin, where):
        raise ReleaseError(f"mlperf-logging {pin.version} in {where} fails its verification: {why}. Reinstall it "
                           f"with `{pin.command()}` (it replaces a folder of yours that fails)")
    return where


def checked(release: Path | None) -> Path | None:
    """``release`` where it may judge: a cached release verified now, before its use; a folder the user gave
    (logging_release, audit_logging) as it is."""
    pin = table.of_folder(release) if release is not None else None
    if pin is not None and release is not None:
        verify(pin, release)
    return release


# --- installing
def _prepare_cache() -> Path:
    """The cache folder, made where missing; this user's, not writable by others (a folder Snakemake made for the
    stamp, with the umask's mode, is made 0700)."""
    cache = table.cache_dir()
    cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        cache.mkdir(mode=0o700)
    if unsafe := _unsafe(cache.parent, private=False) or _unsafe(cache, private=False):
        raise ReleaseError(f"the release cache: {unsafe}; fix it, or set XDG_CACHE_HOME to a folder of yours")
    cache.chmod(0o700)
    return cache


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _pip(pin: Pin, target: Path, find_links: Path | None) -> None:
    """``pip install`` of exactly the pinned wheel into ``target`` (no dependencies: they are the venv's)."""
    req = target.parent / "requirements.txt"
    req.write_text(pin.requirement(), encoding="utf-8")
    source = ["--no-index", "--find-links", str(find_links)] if find_links else []
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--require-hashes", "--only-binary", ":all:",
           "--no-compile", "--no-input", "--disable-pip-version-check", "--target", str(target), *source,
           "-r", str(req)]
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    print(proc.stdout + proc.stderr, flush=True)
    if proc.returncode:
        errors = [line for line in (proc.stderr or proc.stdout).splitlines() if line.startswith("ERROR")]
        raise ReleaseError(
            f"could not install mlperf-logging {pin.version} (which judges ruleset {pin.ruleset}) from "
            f"{find_links or 'PyPI'}: {(errors or ['pip failed'])[-1]}. With network: `{pin.command()}`; without: "
            f"on a machine with network `pip download --no-deps {table.DIST}=={pin.version} -d WHEELS`, copy WHEELS "
            f"here, then `{pin.command()} --find-links WHEELS`")


def _dependencies(where: Path) -> None:
    """The release's own requirements must be in the venv it runs with (it is installed without them)."""
    from packaging.requirements import Requirement

    dist = next(iter(metadata.distributions(path=[str(where)])))
    missing = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            if not req.specifier.contains(metadata.version(req.name), prereleases=True):
                missing.append(f"{text} (the venv has {metadata.version(req.name)})")
        except metadata.PackageNotFoundError:
            missing.append(f"{text} (not installed)")
    if missing:
        raise ReleaseError(f"mlperf-logging {dist.version} needs {', '.join(missing)} in this venv; install them "
                           "with pip")


def install(pin: Pin, find_links: Path | None = None) -> Path:
    """Install ``pin`` into its cache folder unless a verified one is there; the folder. A folder of this user's
    that fails its verification is replaced; one of another user's, or open to others, is refused."""
    cache = _prepare_cache()
    where = table.folder(pin)
    if os.path.lexists(where):
        why = problem(pin, where)
        if why is None:
            return where
        if unsafe := _unsafe(where):
            raise ReleaseError(f"{where}: {unsafe}; remove it yourself, then `{pin.command()}`")
        print(f"replacing {where}: {why}", flush=True)
    work = Path(tempfile.mkdtemp(prefix=f".{pin.name}.", suffix=".part", dir=cache))  # unique, mode 0700
    try:
        target = work / "release"
        target.mkdir(mode=0o700)
        _pip(pin, target, find_links)
        if (tree := versions.describe(target).digest) != pin.tree:
            raise ReleaseError(f"mlperf-logging {pin.version} from {find_links or 'PyPI'} installed a tree "
                               f"({tree[:16]}...) other than the pinned one ({pin.tree[:16]}...)")
        _dependencies(target)
        atomic.write_json(target / MANIFEST, {"version": pin.version, "tree": pin.tree, "files": _walk(target)})
        if os.path.lexists(where):  # ours, failing its verification: moved aside in one step, then removed
            os.rename(where, work / "replaced")
        try:
            os.rename(target, where)  # in one step: another process sees no folder, or the whole of it
        except OSError:  # another install won the race (or made it since): use the winner's, verified
            if why := problem(pin, where):
                raise ReleaseError(f"mlperf-logging {pin.version} in {where} (installed beside this one) fails its "
                                   f"verification: {why}") from None
    finally:
        _remove(work)
    return where


def job(job: Any) -> None:
    """rules/release.smk: params ruleset and usage; output the stamp (written once the release verifies)."""
    pin = table.pinned(job.params["ruleset"], job.params["usage"])
    if pin is None:
        raise ReleaseError(f"ruleset {job.params['ruleset']} has no row in {table.TABLE}")
    where = install(pin)
    atomic.write_json(job.output.first, {"ruleset": pin.ruleset, "version": pin.version, "folder": str(where),
                                         "tree": pin.tree})
    print(f"mlperf-logging {pin.version} in {where} judges ruleset {pin.ruleset}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.core.releases", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    add = sub.add_parser("install", help="install the release that judges RULESET into the cache (verified)")
    add.add_argument("ruleset")
    add.add_argument("--usage", default="training")
    add.add_argument("--find-links", type=Path, default=None,
                     help="a folder holding the wheel (pip download --no-deps mlperf-logging==VERSION -d DIR): "
                     "offline, from there only")
    sub.add_parser("list", help="the table, and where each release is installed")
    args = p.parse_args(argv)
    try:
        if args.command == "list":
            for pin in table.pins():
                state = ("the venv's own" if table.venv_has(pin) else
                         "not installed" if not os.path.lexists(table.folder(pin)) else
                         problem(pin, table.folder(pin)) or "installed, verified")
                print(f"{pin.usage} {pin.ruleset}: {table.DIST} {pin.version} ({table.folder(pin)}: {state})")
            return
        pin = table.pinned(args.ruleset, args.usage)
        if pin is None:
            sys.exit(f"error: {args.usage} ruleset {args.ruleset} has no row in {table.TABLE} (it has: "
                     f"{', '.join(p.ruleset for p in table.pins() if p.usage == args.usage)})")
        print(f"mlperf-logging {pin.version} in {install(pin, args.find_links)} judges ruleset {pin.ruleset}")
    except MlreproError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
