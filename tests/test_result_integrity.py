"""A finished result is trusted only while it matches the hash its run recorded, and an output folder that cannot be
written is refused, naming it (the cases of the fault matrix that no other test held: tampering through the run's
record, a read-only output folder)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from mlrepro.core import integrity, outdir_lock
from mlrepro.core.hashing import sha256_file
from tests.conftest import write_mllog


def _run(folder: Path) -> Path:
    """A finished run's folder (result.txt and the run.json recording its hash); its result."""
    result = write_mllog(folder / "result.txt", "resnet", 1_000_000, 1.0)
    (folder / "run.json").write_text(json.dumps({"status": "success", "result_sha256": sha256_file(result)}))
    return result


def test_a_result_is_named_when_it_or_its_runs_record_changed(tmp_path: Path) -> None:
    result = _run(tmp_path / "0")
    summary = result.with_name("run.json")
    assert integrity.result_problem(result) is None
    original = result.read_bytes()
    result.write_bytes(original.replace(b'"key": "run_stop"', b'"key": "run_stop" ', 1))  # one byte more
    assert f"{result}: changed since its run finished" in (integrity.result_problem(result) or "")
    with pytest.raises(integrity.Tampered, match="changed since its run finished"):
        integrity.verify_results([result])
    result.write_bytes(original)
    record = json.loads(summary.read_text())
    summary.write_text(json.dumps({k: v for k, v in record.items() if k != "result_sha256"}))  # the hash deleted
    assert integrity.result_problem(result) == (f"{summary}: records no result_sha256 (written by an older "
                                                "mlrepro); run the run again")
    summary.write_text("{not json")
    assert f"{summary}: cannot read the run's record" in (integrity.result_problem(result) or "")
    summary.write_text(json.dumps(record))
    result.unlink()
    assert f"{result}: missing (its run recorded sha256 {record['result_sha256'][:12]}" in (
        integrity.result_problem(result) or "")


def test_an_output_folder_that_cannot_be_written_is_refused_naming_it() -> None:
    """Not writable by the user who runs the pipeline (root writes anywhere: there a forked child that is nobody, who
    can read the folder, takes the lock): the lock, taken before any job, is refused naming the folder and what to
    do; nothing is made."""
    base = Path(tempfile.mkdtemp(prefix="mlrepro-readonly-", dir="/tmp"))  # pytest's folders are 0700: unreachable
    try:
        _refused_unwritable(base)
    finally:
        shutil.rmtree(base)


def _refused_unwritable(base: Path) -> None:
    base.chmod(0o755)
    outdir = base / "results"
    outdir.mkdir()
    outdir.chmod(0o555)
    if os.geteuid() != 0:
        with pytest.raises(outdir_lock.OutdirLocked) as e:
            outdir_lock.acquire(outdir)
        said = str(e.value)
    else:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the user who runs the pipeline, who can read the folder but not write into it
            try:
                os.setgid(65534)
                os.setuid(65534)
                os.listdir(outdir)
                outdir_lock.acquire(outdir)
                os.write(write, b"acquired")
            except BaseException as e:  # what it said, whatever it is
                os.write(write, f"{type(e).__name__}: {e}".encode())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        said = os.read(read, 4000).decode()
        os.close(read)
        assert said.startswith("OutdirLocked: "), said
    assert f"output folder {outdir}: cannot write its lock file" in said and "must be writable" in said, said
    assert list(outdir.iterdir()) == []
