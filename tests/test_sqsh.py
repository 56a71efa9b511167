"""A registry image imported once per system into a .sqsh (issue 42, item 5): the planning, the import job's
command, the record and its verification (a replaced or half-written file is refused), and the CONT runs are given.
The import itself on the simulated GPU cluster: tests/test_gpu_cluster.py."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from mlrepro.containers import sqsh
from mlrepro.core.hashing import sha256_file
from tests.test_vendor_launch import _config, _folder, _plan

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(("ref", "uri"), [
    ("nvcr.io/nvidia/pytorch:24.09-py3", "docker://nvcr.io#nvidia/pytorch:24.09-py3"),
    (f"nvcr.io/nvidia/pytorch@{DIGEST}", f"docker://nvcr.io#nvidia/pytorch@{DIGEST}"),
    ("registry.example:5000/team/img:1", "docker://registry.example:5000#team/img:1"),
    ("localhost/img:1", "docker://localhost#img:1"),
    ("nvidia/pytorch:24.09", "docker://nvidia/pytorch:24.09"),  # Docker Hub: no registry part
    ("ubuntu", "docker://ubuntu"),
])
def test_a_registry_reference_in_enroots_uri_form(ref: str, uri: str) -> None:
    assert sqsh.is_registry_ref(ref)
    assert sqsh.enroot_uri(ref) == uri


def test_files_are_no_registry_references_and_bad_references_are_named() -> None:
    assert not any(sqsh.is_registry_ref(p) for p in ("/lustre/x.sqsh", "./x.sqsh", "img.sqsh", "/a/b.sif"))
    with pytest.raises(sqsh.SqshError, match="no registry reference"):
        sqsh.enroot_uri("nvcr.io/Bad Name:1")
    with pytest.raises(sqsh.SqshError, match="platform"):
        sqsh.arch("linux/s390x")


def test_the_import_job_runs_enroot_import_for_the_systems_architecture(tmp_path: Path) -> None:
    job = sqsh.planned(tmp_path, "gb200", f"nvcr.io/nvidia/pytorch@{DIGEST}", "linux/arm64")
    assert Path(job.sqsh) == tmp_path / "sqsh" / "gb200" / f"nvcr.io+nvidia+pytorch@{DIGEST}.sqsh"  # named by digest
    assert job.record == job.sqsh + ".json"
    assert job.argv == ["enroot", "import", "--arch", "aarch64", "--output", job.sqsh,
                        f"docker://nvcr.io#nvidia/pytorch@{DIGEST}"]
    x86 = sqsh.planned(tmp_path, "dgx", "nvcr.io/nvidia/pytorch:24.09-py3", None)
    assert "--arch" not in x86.argv and Path(x86.sqsh).name == "nvcr.io+nvidia+pytorch+24.09-py3.sqsh"


def fake_enroot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "enroot").write_text(f"#!/bin/bash\necho \"$@\" >> {tmp_path / 'calls'}\n{body}\n")
    (bin_dir / "enroot").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "calls"


def test_an_import_is_written_whole_and_recorded_by_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_enroot(tmp_path, monkeypatch, 'out="${@: -2:1}"; head -c 5000 /dev/urandom > "$out"')
    job = sqsh.planned(tmp_path / "out", "dgx", "nvcr.io/nvidia/pytorch:24.09-py3", "linux/amd64")
    record = sqsh.run(job)
    file = Path(job.sqsh)
    assert record == json.loads(Path(job.record).read_text())
    assert record["sha256"] == sha256_file(file) and record["size"] == 5000 and record["arch"] == "x86_64"
    argv = calls.read_text().split()
    assert argv[:4] == ["import", "--arch", "x86_64", "--output"] and argv[-1] == sqsh.enroot_uri(job.ref)
    assert Path(argv[4]).parent == file.parent and Path(argv[4]) != file  # a temporary name, renamed once hashed
    assert sorted(p.name for p in file.parent.iterdir()) == sorted([file.name, Path(job.record).name])
    assert sqsh.verify(file, Path(job.record)) == record


def test_a_failed_import_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_enroot(tmp_path, monkeypatch, 'out="${@: -2:1}"; echo partial > "$out"; exit 1')
    job = sqsh.planned(tmp_path / "out", "dgx", "nvcr.io/nvidia/pytorch:24.09-py3", None)
    with pytest.raises(sqsh.SqshError, match="exited with status 1"):
        sqsh.run(job)
    assert list(Path(job.sqsh).parent.iterdir()) == []


def test_a_replaced_or_half_written_sqsh_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_enroot(tmp_path, monkeypatch, 'out="${@: -2:1}"; head -c 5000 /dev/urandom > "$out"')
    job = sqsh.planned(tmp_path / "out", "dgx", "nvcr.io/nvidia/pytorch:24.09-py3", None)
    sqsh.run(job)
    file, record = Path(job.sqsh), Path(job.record)
    data = file.read_bytes()
    file.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, other content
    with pytest.raises(sqsh.SqshError, match=re.escape("is not the image imported from nvcr.io/nvidia/pytorch:24")):
        sqsh.verify(file, record)
    file.write_bytes(data[:100])  # half-written
    with pytest.raises(sqsh.SqshError, match="replaced or half-written"):
        sqsh.verify(file, record)
    record.write_text("{}")
    with pytest.raises(sqsh.SqshError, match="no import record"):
        sqsh.verify(file, record)


def test_each_system_imports_its_registry_image_once_and_its_runs_get_the_file(tmp_path: Path) -> None:
    _folder(tmp_path)
    raw = _config(tmp_path, {"EXTRADIR": "/extra"})
    raw["systems"]["sim_n2"]["platform"] = "linux/arm64"
    plan = _plan(raw, tmp_path)
    imports = plan.launches.image_imports
    assert sorted(imports) == [("sim_n1", "resnet"), ("sim_n2", "resnet")]
    n1, n2 = imports[("sim_n1", "resnet")], imports[("sim_n2", "resnet")]
    assert Path(n1.sqsh).parent.name == "sim_n1" and n1.arch is None and n2.arch == "aarch64"
    for (system, benchmark), job in imports.items():
        launch = plan.launches.spec(system, benchmark)
        assert launch.container == str(Path(job.sqsh).resolve())  # CONT: the system's file, for every run
        assert plan.sqsh_record(system, benchmark) == [job.record]  # each run's input: the import's record
    assert plan.sqsh_job("sim_n2", Path(n2.sqsh).name)["arch"] == "aarch64"
    shown = plan.launches.image_import("sim_n2", "resnet")
    assert plan.launches.cluster_preview("sim_n2", "resnet")["image_import"] == shown
    assert shown is not None and shown["argv"] == n2.argv and shown["imported"] is False and \
        shown["size_bytes"] is None and "sim_n2 (aarch64)" in shown["runs_on"]


def test_a_sqsh_file_or_another_engine_imports_nothing(tmp_path: Path) -> None:
    _folder(tmp_path)
    raw = _config(tmp_path, {"EXTRADIR": "/extra"})
    raw["benchmarks"]["resnet"]["image"] = "/lustre/images/vendor.sqsh"
    plan = _plan(raw, tmp_path)
    assert plan.launches.image_imports == {}
    assert plan.launches.spec("sim_n1", "resnet").container == "/lustre/images/vendor.sqsh"
    raw = _config(tmp_path, {"EXTRADIR": "/extra"})
    raw["engine"] = "apptainer"
    assert _plan(raw, tmp_path).launches.image_imports == {}
