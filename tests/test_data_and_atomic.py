"""Datasets are checksummed and every output appears only when complete."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlrepro.core import atomic
from mlrepro.datasets import generated, manifest, stamps
from mlrepro.gate import compliance
from tests.conftest import write_mllog

RESNET_DATA = {"data": {"classes": 3, "image_size": 8, "train_samples": 16, "eval_samples": 8, "noise": 0.1}}


def test_manifest_detects_changed_and_missing_files(tmp_path: Path) -> None:
    folder = tmp_path / "resnet"
    listed = generated.generate("resnet", folder, RESNET_DATA, seed=1)
    assert set(listed) == {"train.npz", "eval.npz"}
    assert manifest.verify(folder) == []
    (folder / "train.npz").write_bytes(b"tampered")
    (folder / "eval.npz").unlink()
    problems = {p.file.name: p.problem for p in manifest.verify(folder)}
    assert "the manifest says" in problems["train.npz"]
    assert problems["eval.npz"] == "listed in the manifest but missing"
    with pytest.raises(manifest.DataChecksumError, match=r"train\.npz: sha256 is .* the manifest says"):
        manifest.require_valid(folder)



def test_a_copied_dataset_is_checked_where_it_is_now(tmp_path: Path) -> None:
    """A receipt kept inside its folder follows the folder: a corrupted copy is found, the original untouched."""
    original = tmp_path / "one" / "resnet"
    generated.generate("resnet", original, RESNET_DATA, seed=1)
    stamps.write_receipt(original / ".receipt.json", original)
    assert stamps.changed_files(stamps.read_receipt(original / ".receipt.json")) == []
    copy = Path(shutil.copytree(tmp_path / "one", tmp_path / "two")) / "resnet"
    (copy / "eval.npz").write_bytes(b"corrupted")
    receipt = stamps.read_receipt(copy / ".receipt.json")
    assert receipt["folder"] == str(copy.resolve())
    assert {p.file for p in stamps.changed_files(receipt)} == {copy.resolve() / n for n in ("eval.npz", "train.npz",
                                                                                            manifest.MANIFEST)}
    assert stamps.changed_files(stamps.read_receipt(original / ".receipt.json")) == []

def test_failed_generation_leaves_no_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlrepro.core import minis
    module = minis.load_module("resnet")

    def broken(out_dir: Path, params: dict, seed: int) -> None:
        (out_dir / "train.npz").write_bytes(b"half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(module, "generate_data", broken)
    monkeypatch.setattr(generated, "load_module", lambda name: module)
    with pytest.raises(RuntimeError, match="disk full"):
        generated.generate("resnet", tmp_path / "resnet", RESNET_DATA, seed=1)
    assert not (tmp_path / "resnet").exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    atomic.write_json(target, {"v": 1})
    with pytest.raises(KeyboardInterrupt), atomic.atomic_path(target) as tmp:
        tmp.write_text('{"v": 2, "trunc')
        raise KeyboardInterrupt
    assert target.read_text().strip().endswith("}") and '"v": 1' in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_killed_training_leaves_no_result_file(tmp_path: Path) -> None:
    """SIGKILL in the middle of a run: the MLPerf log stays a hidden .part file, never result.txt."""
    generated.generate("resnet", tmp_path / "data", RESNET_DATA, seed=1)
    # a target no accuracy reaches: the run is still training when it is killed, however fast the machine
    params = {**RESNET_DATA, "image": "pytorch", "target": 1.01, "max_epochs": 500, "width": 2, "blocks": [1],
              "batch_size": 4, "lr": 0.01, "end_lr": 0.0001, "momentum": 0.9, "weight_decay": 0.0, "warmup_epochs": 0}
    import json

    proc = subprocess.Popen(
        [sys.executable, "-m", "mlrepro.train", "--benchmark", "resnet", "--data-dir", str(tmp_path / "data"),
         "--params", json.dumps(params), "--seed", "1", "--result", str(tmp_path / "run" / "result.txt"),
         "--summary", str(tmp_path / "run" / "run.json"), "--submission",
         json.dumps({"org": "o", "platform": "p"})],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    def partial() -> Path | None:  # the log's temporary name is unique per process (atomic.temp_name)
        return next((tmp_path / "run").glob(".result.txt.*.part"), None)

    while time.time() < deadline and not ((p := partial()) and "epoch_start" in p.read_text()):
        assert proc.poll() is None, "the training ended before the kill"
        time.sleep(0.2)
    assert partial(), "training never started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "run" / "result.txt").exists()
    assert not (tmp_path / "run" / "run.json").exists()


def test_compliance_gate_fails_with_the_checkers_messages(tmp_path: Path) -> None:
    bad = write_mllog(tmp_path / "result_0.txt", "resnet", 1_700_000_000_000, 1.0)
    lines = [line for line in bad.read_text().splitlines() if '"run_start"' not in line]
    bad.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, "-m", "mlrepro.gate.compliance", str(bad), "--ruleset", "2.0.0",
                          "--out", str(tmp_path / "verdict.json")], capture_output=True, text=True, check=False)
    assert out.returncode != 0
    assert str(bad) in out.stderr and "fails the MLPerf compliance checker" in out.stderr
    assert "run_start" in out.stderr  # the checker's own message names the missing key
    assert not (tmp_path / "verdict.json").exists()
    good = write_mllog(tmp_path / "result_1.txt", "resnet", 1_700_000_000_000, 1.0)
    assert compliance.check(good, "training", "2.0.0").valid
