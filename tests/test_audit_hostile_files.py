"""Issue 23: a package's provenance manifest and system JSONs that would abort or hang the audit get a
verdict instead (read through mlrepro/core/safe_read.py): nested 100,000 deep, a link to /dev/zero, a FIFO,
a 3 GB sparse file; and a published manifest hash is not defeated by deleting the manifest."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from mlrepro.audit import discover, manifest, package, scoring
from mlrepro.package.provenance import MANIFEST

DEEP = b"[" * 100_000 + b"]" * 100_000


def _deep(path: Path) -> None:
    path.write_bytes(DEEP)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _sparse(path: Path) -> None:
    with path.open("wb") as f:
        f.truncate(3 << 30)


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "nested 100,000 deep": (_deep, r"nested too deep to read \(limit 100 levels\)"),
    "a link to /dev/zero": (_dev_zero, r"a symlink out of .* \(-> /dev/zero\); not read"),
    "a FIFO": (_fifo, r"not a regular file \(a FIFO\); not read"),
    "a 3 GB sparse file": (_sparse, r"3221225472 bytes, over the limit of \d+; not read"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_provenance_json_is_an_error_not_a_crash(tmp_path: Path, case: str) -> None:
    make, verdict = HOSTILE[case]
    make(tmp_path / MANIFEST)
    check = manifest.verify(tmp_path)
    assert check.present and not check.verified
    [finding] = [f for f in check.findings if f.kind == "manifest unreadable"]
    assert finding.severity == "error"
    assert re.search(verdict, finding.message), finding.message


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_system_json_gets_a_verdict(tmp_path: Path, case: str) -> None:
    make, verdict = HOSTILE[case]
    (tmp_path / "systems").mkdir()
    make(tmp_path / "systems" / "sys.json")
    org = discover.Org("Mallory", tmp_path, [discover.SystemDir("sys", tmp_path / "results" / "sys", [])], [])
    assert scoring.load_system_desc(org, org.systems[0]).desc is None
    result = package.PackageVerdict()
    assert package._division(org, "sys", result) == ""
    [error] = [e for e in result.errors if "cannot read the division from systems/sys.json" in e]
    assert re.search(verdict, error), error


def test_a_published_hash_is_not_defeated_by_deleting_the_manifest(tmp_path: Path) -> None:
    check = manifest.verify(tmp_path, "ab" * 32)
    assert not check.present and not check.verified
    assert [(f.severity, f.kind) for f in check.findings] == [("error", "manifest missing")]
    assert "published the sha256 " + "ab" * 32 in check.findings[0].message
    assert manifest.verify(tmp_path).findings == []  # without a published hash: audited as before, with a note


def test_a_symlinked_results_folder_is_named_not_followed(tmp_path: Path) -> None:
    org = tmp_path / "Mallory"
    (org / "systems").mkdir(parents=True)
    (org / "results").symlink_to("/etc")
    [found] = discover.find_orgs(org)
    assert found.systems == []
    assert "results: a symlinked folder (-> /etc); not followed" in found.problems
    assert discover.find_orgs(tmp_path)[0].systems == []  # as one organisation of a round too
