"""Issue 23: a package's provenance manifest and system JSONs that would abort or hang the audit get a
verdict instead (read through mlrepro/core/safe_read.py): nested 100,000 deep, a link to /dev/zero, a FIFO,
a 3 GB sparse file; a published manifest hash is not defeated by deleting the manifest; names that are not
UTF-8 are audited and shown escaped."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlrepro.audit import discover, manifest, package, report, scoring
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


def test_names_that_are_not_utf8_are_audited_and_reported_escaped(tmp_path: Path) -> None:
    # bytes 0xff and 0xfe are never UTF-8: a result file, a system folder and an organisation folder so named
    root = tmp_path / "round"
    shutil.copytree(Path(__file__).parent / "fixtures" / "audit" / "round", root)
    results = next((root / "Baidu" / "results").iterdir())
    shutil.copytree(results, results.with_name(os.fsdecode(b"system_\xfe")))
    bench = next(p for p in results.iterdir() if p.is_dir())
    shutil.copy(bench / "result_0.txt", bench / os.fsdecode(b"result_\xff.txt"))
    shutil.copytree(root / "Google", root / os.fsdecode(b"Org_\xfe"))
    out = tmp_path / "out"
    for step in ("check", "summarize"):
        proc = subprocess.run([sys.executable, "-m", "mlrepro.audit", step, "--root", str(root), "--out", str(out),
                               "--ruleset", "1.1.0", "--jobs", "1"], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
    csv_text = (out / "summary.csv").read_text(encoding="utf-8")
    assert "Org_\\udcfe" in csv_text and "system_\\udcfe" in csv_text
    html = "".join(p.read_text(encoding="utf-8") for p in (out / "report").rglob("*.html"))
    assert "Org_\\udcfe" in html and "result_\\udcff.txt" in html


MANY = 5_000  # tiny files in one benchmark folder: enough to see the caps, quick to audit
# Through Snakemake: enough that an announcement naming its input files could not fit the log's 20,000 characters
# (result_0.txt to result_1999.txt: over 28,000 characters of names alone, before their folders); fewer to check
SNAKEMAKE_MANY = 2_000


def _many_tiny_files(tmp_path: Path, count: int = MANY) -> Path:
    """The fixture round plus an organisation whose one benchmark folder holds ``count`` junk or empty result files."""
    root = tmp_path / "round"
    shutil.copytree(Path(__file__).parent / "fixtures" / "audit" / "round" / "Baidu", root / "Baidu")
    bench = root / "Mallory" / "results" / "sys" / "resnet"
    bench.mkdir(parents=True)
    (root / "Mallory" / "systems").mkdir()
    (root / "Mallory" / "systems" / "sys.json").write_text('{"division": "closed"}')
    for i in range(count):
        (bench / f"result_{i}.txt").write_bytes(b"" if i % 2 else b"junk\n")
    return root


def _mallory_files(out: Path) -> list[dict[str, Any]]:
    audit = json.loads((out / "audit.json").read_text(encoding="utf-8"))
    return [f for o in audit["orgs"] if o["name"] == "Mallory" for s in o["systems"] for b in s["benchmarks"]
            for f in b["files"]]


def test_many_tiny_files_each_get_a_verdict_and_the_report_stays_bounded(tmp_path: Path) -> None:
    root, out = _many_tiny_files(tmp_path), tmp_path / "out"
    logs = ""
    for step in ("check", "summarize"):
        proc = subprocess.run([sys.executable, "-m", "mlrepro.audit", step, "--root", str(root), "--out", str(out),
                               "--ruleset", "1.1.0", "--jobs", "2"], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        logs += proc.stdout + proc.stderr
    files = _mallory_files(out)  # the machine-readable output: every file, each with its verdict
    assert sorted(f["name"] for f in files) == sorted(f"result_{i}.txt" for i in range(MANY))
    assert not any(f["valid"] for f in files)
    assert len(logs) < 10_000, "the steps' output does not grow with the file count"
    pages = {p.name: p.read_text(encoding="utf-8") for p in (out / "report").rglob("*.html")}
    for name in ("index.html", "Mallory__sys.html"):
        html = pages[name]
        # per folder and finding: FILES_PER_FINDING rows, then one that counts the rest and names MORE_NAMES
        rows = re.findall(r"<tr><td>(?:[^<]*</td><td>(?:<a [^>]*>)?sys(?:</a>)?</td><td>resnet</td><td>)?"
                          r"(result_\d+\.txt)</td>", html)
        assert len(rows) == report.FILES_PER_FINDING, (name, rows)
        [more] = re.findall(r"<strong>([\d,]+) more file\(s\) with the same finding</strong>: ([^<]*)", html)
        assert int(more[0].replace(",", "")) == MANY - report.FILES_PER_FINDING
        assert len(re.findall(r"result_\d+\.txt", more[1])) == report.MORE_NAMES
    # a package checker message naming every file ("logs no seed") is cut at MESSAGE_CHARS
    assert "(whole in audit.json)" in pages["index.html"]
    assert sum(map(len, pages.values())) < 400_000, "the report does not grow with the file count"


@pytest.mark.integration
def test_many_tiny_files_do_not_fill_the_snakemake_log(tmp_path: Path) -> None:
    from tests.conftest import snakemake

    root, out = _many_tiny_files(tmp_path, SNAKEMAKE_MANY), tmp_path / "out"
    proc = snakemake(tmp_path, "--config", f"audit={root}", f"audit_out={out}", "ruleset=1.1.0")
    assert len(_mallory_files(out)) == SNAKEMAKE_MANY
    # each audit job is announced by its message (counts), not by its list of MANY input files
    log = proc.stdout + proc.stderr
    assert f"audit_check: {len(discover.result_files(discover.find_orgs(root))):,} result files" in log
    assert "result_1.txt" not in log
    assert len(log) < 20_000, log[-3000:]


def test_only_rows_equal_but_for_the_name_are_counted_together() -> None:
    run = {"org": "O", "system": "s", "benchmark": "bert", "valid": True, "crash": "", "status": "success",
           "epochs": 3, "epochs_unit": "samples", "messages": [], "notes": [], "sanity": []}
    compliant = [{**run, "name": f"result_{i}.txt", "minutes": 10.0 + i} for i in range(10)]
    assert report.bounded(compliant) == compliant  # a real package's runs: each its own row
    same = [{**run, "name": f"result_{i}.txt", "minutes": 10.0} for i in range(report.FILES_PER_FINDING + 7)]
    shown = report.bounded(same)
    assert shown[:report.FILES_PER_FINDING] == same[:report.FILES_PER_FINDING]
    assert [(r["more"], r["names"]) for r in shown[report.FILES_PER_FINDING:]] == [
        (7, [f["name"] for f in same[report.FILES_PER_FINDING:][:report.MORE_NAMES]])]
