"""The package checked before anything of it runs, and found unchanged after.

Before: every entry is a folder, a regular file or a link inside the package (a result symlinked to
/dev/zero or out of the package, a FIFO, a device: refused, named); the provenance manifest, read with
bounds, matches the package (mlrepro.audit.manifest.verify: a result edited after packaging is named) and
the published hash when one is given (``manifest_sha256``). The files' hashes are recorded then.
After (the report step): the package hashed again; any change is an error of the reproduction, since the
package's own code ran with the user's rights (mlrepro/reproduce/stage.py runs it from a copy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlrepro.audit import manifest as audit_manifest
from mlrepro.core import safe_read
from mlrepro.core.hashing import sha256_file
from mlrepro.package.provenance import MANIFEST, SIDECAR, UNHASHED, package_files
from mlrepro.reproduce.errors import ReproduceError
from mlrepro.reproduce.stage import listing, survey


def _tree(org_dir: Path) -> dict[str, str]:
    """Every file of the package with its sha256 (links by their target text), the manifest's too."""
    files = package_files(org_dir, safe_read.DEFAULT_MAX_BYTES)  # a sparse terabyte is named, never hashed
    for name in (MANIFEST, SIDECAR):
        if (org_dir / name).is_file() and not (org_dir / name).is_symlink():
            files[name] = sha256_file(org_dir / name)
    return files


def before(org_dir: Path, expected_sha256: str | None = None) -> dict[str, Any]:
    """The package's check before the reproduction: ReproduceError naming what differs; else the record
    (manifest verdict, every file's hash) that :func:`after` compares with."""
    if unsafe := survey(org_dir)[1]:
        raise ReproduceError(f"The package {org_dir} holds entries a package does not: {listing(unsafe)}. "
                             "Nothing was run; remove them, or reproduce from an intact copy of the package.")
    # the audit's check reads the manifest bounded and refuses a removed one when a published hash names it
    check = audit_manifest.verify(org_dir, expected_sha256)
    errors = [f"{f.path}: {f.message}" for f in check.findings if f.severity == "error"]
    if errors:
        raise ReproduceError(f"The package {org_dir} does not match its {MANIFEST}: {listing(errors)}. "
                             "Nothing was run: a reproduction judges the package as it was made.")
    files = _tree(org_dir)
    if large := [f"{rel} ({files[rel].removeprefix(UNHASHED)})" for rel in files if files[rel].startswith(UNHASHED)]:
        raise ReproduceError(f"The package {org_dir} holds files over the size limit of {safe_read.DEFAULT_MAX_BYTES} "
                             f"bytes, which are not hashed: {listing(large)}. Nothing was run: a package's files are "
                             "checked unchanged after the reproduction.")
    return {"package": str(org_dir), "manifest": check.to_dict(), "files": files}


def after(org_dir: Path, record: dict[str, Any]) -> list[str]:
    """What changed in the package since :func:`before` recorded it (empty: nothing)."""
    now, then = _tree(org_dir), record["files"]
    return ([f"{rel}: added" for rel in sorted(now.keys() - then.keys())]
            + [f"{rel}: removed" for rel in sorted(then.keys() - now.keys())]
            + [f"{rel}: changed" for rel in sorted(now.keys() & then.keys()) if now[rel] != then[rel]])
