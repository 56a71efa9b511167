"""The provenance manifest and run ledger of a package the pipeline made, and the audit's verification:
every tampering case named by what changed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mlrepro.audit import manifest
from mlrepro.package import provenance
from mlrepro.runs import ledger
from tests.conftest import REPO

pytestmark = pytest.mark.integration


@pytest.fixture
def package(tiny_package: Path, tmp_path: Path) -> Path:
    """A private copy of the pipeline's package (one organisation folder) to tamper with."""
    return Path(shutil.copytree(tiny_package / "submission" / "mlrepro", tmp_path / "mlrepro", symlinks=True))


def _findings(org: Path, expected: str | None = None) -> list[tuple[str, str, str]]:
    check = manifest.verify(org, expected)
    return [(f.severity, f.kind, f.message) for f in check.findings if f.severity == "error"]


def _manifest(org: Path) -> dict:
    return json.loads((org / provenance.MANIFEST).read_text())


def _rewrite_manifest(org: Path, doc: dict) -> str:
    """A careful tamperer: rewrite the manifest and its sidecar together."""
    return provenance.write(org, doc)


def _result(org: Path, i: int) -> Path:
    return next((org / "results").glob(f"*/resnet/result_{i}.txt"))


def test_manifest_records_every_file_run_and_launch(tiny_package: Path) -> None:
    org = tiny_package / "submission" / "mlrepro"
    doc = _manifest(org)
    data = (org / provenance.MANIFEST).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    assert (org / provenance.SIDECAR).read_text() == f"{digest}  {provenance.MANIFEST}\n"
    # the hash is published outside the package: in the package verdict and the report
    assert json.loads((tiny_package / "package_check.json").read_text())["manifest_sha256"] == digest
    assert digest in (tiny_package / "report.html").read_text()
    files = {p.relative_to(org).as_posix() for p in org.rglob("*") if p.is_file()}
    assert set(doc["files"]) == files - {provenance.MANIFEST, provenance.SIDECAR}
    assert doc["files"]["systems/" + next((org / "systems").iterdir()).name] == \
        hashlib.sha256(next((org / "systems").iterdir()).read_bytes()).hexdigest()
    runs = json.loads((tiny_package / "package_check.json").read_text())
    assert runs["valid"]  # the official package checker passed with the manifest present
    assert len(doc["runs"]) == 5 and len(doc["ledger"]) == 5
    by_launch = {r["launch"]: r for r in doc["ledger"]}
    for run in doc["runs"]:
        launch = by_launch[run["launch"]]
        summary = json.loads((tiny_package / run["run_dir"] / "run.json").read_text())
        assert launch["seed"] == run["seed"] == summary["seed"]
        assert launch["status"] == "success" and launch["exit_status"] == 0
        assert launch["start"] * 1000 <= run["run_start_ms"] <= run["run_stop_ms"] <= launch["stop"] * 1000
        assert "slurm_job_id" in launch
    assert doc["datasets"]["resnet"]["sha256"] == hashlib.sha256(
        (tiny_package / "data" / "resnet" / "MANIFEST.sha256").read_bytes()).hexdigest()
    assert doc["config"]["only"] == ["resnet"] and len(doc["config_hash"]) == 16
    assert doc["engines"] == ["native"] and doc["images"] == []  # native runs use no image
    assert doc["git"]["commit"] is None or len(doc["git"]["commit"]) == 40


def test_untouched_package_verifies(tiny_package: Path) -> None:
    org = tiny_package / "submission" / "mlrepro"
    check = manifest.verify(org, json.loads((tiny_package / "package_check.json").read_text())["manifest_sha256"])
    assert check.verified, check.findings


def _edit_time_stamp(org: Path) -> str:
    path = _result(org, 1)
    lines = path.read_text().splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if '"key": "run_stop"' in line)
    event = json.loads(lines[i].partition(":::MLLOG ")[2])
    event["time_ms"] -= 60_000  # one minute faster
    lines[i] = ":::MLLOG " + json.dumps(event) + "\n"
    path.write_text("".join(lines))
    return path.relative_to(org).as_posix()


def _delete_result(org: Path) -> str:
    path = _result(org, 2)
    path.unlink()
    return path.relative_to(org).as_posix()


def _add_result(org: Path) -> str:
    path = _result(org, 0).with_name("result_5.txt")
    shutil.copy(_result(org, 0), path)
    return path.relative_to(org).as_posix()


def _drop_ledger_run(org: Path) -> str:
    doc = _manifest(org)
    dropped = doc["runs"][3]
    doc["ledger"] = [r for r in doc["ledger"] if r["launch"] != dropped["launch"]]
    (org / provenance.MANIFEST).write_bytes(provenance.manifest_bytes(doc))  # the sidecar left as it was
    return dropped["file"]


def _edit_system_json(org: Path) -> str:
    path = next((org / "systems").glob("*.json"))
    desc = json.loads(path.read_text())
    desc["accelerators_per_node"] = "8"
    path.write_text(json.dumps(desc))
    return path.relative_to(org).as_posix()


def _edit_manifest(org: Path) -> str:
    doc = _manifest(org)
    doc["runs"][0]["seed"] += 1
    (org / provenance.MANIFEST).write_bytes(provenance.manifest_bytes(doc))
    return provenance.MANIFEST


TAMPERING: dict[str, tuple[Callable[[Path], str], set[str]]] = {
    "result edited (one time stamp)": (_edit_time_stamp, {"result edited", "time differs from the ledger"}),
    "result deleted": (_delete_result, {"file removed"}),
    "result added": (_add_result, {"file added"}),
    "run dropped from the ledger": (_drop_ledger_run, {"manifest edited", "run missing from the ledger"}),
    "system JSON edited": (_edit_system_json, {"system description changed"}),
    "manifest edited without its hash": (_edit_manifest, {"manifest edited", "seed differs from the ledger"}),
}


@pytest.mark.parametrize("case", list(TAMPERING))
def test_tampering_is_detected_and_named(package: Path, case: str) -> None:
    tamper, kinds = TAMPERING[case]
    assert not _findings(package)
    changed = tamper(package)
    errors = _findings(package)
    assert kinds <= {kind for _, kind, _ in errors}, errors
    assert any(changed in message for _, _, message in errors), errors
    if case == "result edited (one time stamp)":
        assert any("run_stop time_ms is" in m for _, _, m in errors), errors


def test_careful_tamperer_caught_by_the_published_hash(package: Path) -> None:
    """Drop a run from the package, the manifest's files, runs and ledger, and re-hash the manifest:
    the sidecar agrees, the hash published in the report does not."""
    published = hashlib.sha256((package / provenance.MANIFEST).read_bytes()).hexdigest()
    doc = _manifest(package)
    dropped = doc["runs"].pop()
    _result(package, 4).unlink()
    del doc["files"][dropped["file"]]
    doc["ledger"] = [r for r in doc["ledger"] if r["launch"] != dropped["launch"]]
    _rewrite_manifest(package, doc)
    assert not _findings(package)  # self-consistent...
    errors = _findings(package, published)
    assert [k for _, k, _ in errors] == ["manifest differs from the published hash"], errors
    assert published in errors[0][2]


def test_ledger_run_missing_from_the_package_is_named(package: Path) -> None:
    """A run dropped from the package (result, files and runs entries) but still in the ledger."""
    doc = _manifest(package)
    dropped = doc["runs"].pop()
    _result(package, 4).unlink()
    del doc["files"][dropped["file"]]
    _rewrite_manifest(package, doc)
    check = manifest.verify(package)
    warnings = [f for f in check.findings if f.kind == "ledger run not in the package"]
    assert len(warnings) == 1 and dropped["launch"] in warnings[0].message and dropped["run_dir"] in warnings[0].path


def test_manifest_naming_a_file_outside_the_package_is_not_read(package: Path) -> None:
    doc = _manifest(package)
    doc["runs"][0]["file"] = "../../../../../../dev/zero"
    _rewrite_manifest(package, doc)
    errors = _findings(package)
    assert [k for _, k, _ in errors] == ["result missing"] and "/dev/zero" in errors[0][2]


def test_dirty_tree_is_named(package: Path) -> None:
    doc = _manifest(package)
    doc["git"] = {"commit": "0" * 40, "dirty": True, "changed": [" M mlrepro/training/loop.py"]}
    _rewrite_manifest(package, doc)
    check = manifest.verify(package)
    assert check.verified  # a warning, not tampering
    assert any(f.kind == "dirty tree" and "mlrepro/training/loop.py" in f.message for f in check.findings)


def test_package_without_manifest_is_audited_with_a_note(package: Path) -> None:
    (package / provenance.MANIFEST).unlink()
    check = manifest.verify(package)
    assert not check.present and not check.verified and "no provenance.json" in check.note


def test_audit_target_reports_the_tampering(package: Path, tmp_path: Path) -> None:
    published = hashlib.sha256((package / provenance.MANIFEST).read_bytes()).hexdigest()
    changed = _edit_time_stamp(package)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                           "--cores", "2", "--config", f"audit={package}", "ruleset=2.0.0", "audit_out=out",
                           f"manifest_sha256={published}"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    audit = json.loads((tmp_path / "out" / "audit.json").read_text())
    prov = audit["orgs"][0]["provenance"]
    assert prov["present"] and not prov["verified"]
    assert any(f["kind"] == "result edited" and f["path"] == changed for f in prov["findings"])
    html = (tmp_path / "out" / "report" / "index.html").read_text()
    assert "TAMPERED" in html and changed in html


# The ledger on its own: every way a launch can end.

def test_ledger_records_success_failure_and_abort(tmp_path: Path) -> None:
    with ledger.recorded(tmp_path, benchmark="resnet", seed=7):
        (tmp_path / "result.txt").write_text("x")
    with pytest.raises(RuntimeError), ledger.recorded(tmp_path, benchmark="resnet", seed=8):
        raise RuntimeError("training diverged")
    with pytest.raises(SystemExit), ledger.recorded(tmp_path, benchmark="resnet", seed=9):
        sys.exit("error: engine failed")
    records = ledger.read(tmp_path / ledger.LEDGER)
    assert [(r["seed"], r["status"], r["exit_status"]) for r in records] == [
        (7, "success", 0), (8, "failed", 1), (9, "failed", 1)]
    assert records[0]["result_sha256"] == hashlib.sha256(b"x").hexdigest()
    assert "training diverged" in records[1]["error"] and records[2]["error"] == "error: engine failed"


def test_ledger_records_sigterm_and_sigkill(tmp_path: Path) -> None:
    code = ("import sys, time; from pathlib import Path; from mlrepro.runs import ledger\n"
            "with ledger.recorded(Path(sys.argv[1]), benchmark='resnet', seed=int(sys.argv[2])):\n"
            "    print('started', flush=True); time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLURM_JOB_ID": "4242"}
    for seed, sig in ((1, signal.SIGTERM), (2, signal.SIGKILL)):
        proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(seed)], env=env,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        proc.send_signal(sig)
        proc.wait(timeout=30)
    records = ledger.read(tmp_path / ledger.LEDGER)
    assert [(r["seed"], r["status"], r["exit_status"], r["slurm_job_id"]) for r in records] == [
        (1, "aborted", 143, "4242"), (2, "no end record", None, "4242")]

