"""The sampler as a real process: the no-NVML path on this machine, watched-pid exit, kill, crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlrepro.telemetry import start_sampler, summarize
from mlrepro.telemetry.backend import BackendUnavailable, DeviceLost
from mlrepro.telemetry.nvml import NvmlBackend, field_value
from mlrepro.telemetry.store import CHUNK_SUFFIX, CHUNKS, SAMPLES, read_chunks, read_samples, read_sidecar

sys.path.insert(0, str(Path(__file__).parent))
from test_telemetry_replay import GPU_A, GPU_B, gpu_trace


def _has_nvml() -> bool:
    try:
        NvmlBackend().open()
        return True
    except BackendUnavailable:
        return False


def _wait_for_samples(out_dir: Path, n: int, timeout: float = 60.0) -> None:
    """Poll until the sampler's flushed chunks hold ``n`` samples (a loaded machine samples late, not less)."""
    deadline = time.monotonic() + timeout
    while read_chunks(out_dir / CHUNKS).num_rows < n:
        assert time.monotonic() < deadline, f"the sampler flushed fewer than {n} samples in {timeout} s"
        time.sleep(0.05)


def _wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


@pytest.mark.skipif(_has_nvml(), reason="NVML is here; the no-NVML path is tested where it is missing")
def test_without_nvml_the_run_goes_on_and_the_summary_says_why(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="nvmlInit failed"):
        NvmlBackend().open()
    go = tmp_path / "go"
    busy = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\nt = time.time()\n"
    run = subprocess.Popen([sys.executable, "-c", busy + "while time.time() - t < 1.5: pass"])
    handle = start_sampler(tmp_path, hz=10.0, watch_pid=run.pid)
    assert handle.status == "running"
    start = int(time.time() * 1e3)
    go.touch()  # the run starts once the sampler is up, as the driver will do it
    assert run.wait(30) == 0  # the run itself is untouched
    stop = int(time.time() * 1e3)
    handle.stop()
    assert handle.proc is not None and handle.proc.returncode == 0
    s = summarize(tmp_path, start, stop)
    assert s["nvml"].startswith("no NVML: ") and "LibraryNotFound" in s["nvml"]
    assert s["partial"] and s["reasons"][0] == s["nvml"]
    assert s["gpus"] == [] and s["accelerator_energy_j"] is None
    assert s["host"]["samples"] >= 3
    assert s["host"]["peak_rss_mb"] > 1  # the busy child's tree was read
    assert json.loads((tmp_path / "summary.json").read_text())["nvml"] == s["nvml"]
    assert read_sidecar(tmp_path)["status"] == "complete"  # type: ignore[index]


def test_sampler_exits_when_the_watched_process_dies(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        handle = start_sampler(tmp_path, hz=20.0, watch_pid=child.pid, backend="none", flush_every_s=0.1)
        assert handle.status == "running" and handle.proc is not None
        _wait_for_samples(tmp_path, 2)
        child.kill()  # not reaped yet: a zombie must count as dead
        assert _wait_exit(handle.proc, 10) == 0
    finally:
        child.wait()
    side = read_sidecar(tmp_path)
    assert side is not None and side["status"] == "complete"
    assert side["stop_reason"] == f"watched pid {child.pid} exited"
    samples, complete = read_samples(tmp_path)
    assert complete and samples.num_rows >= 2


def test_a_forked_sampler_samples_as_a_spawned_one_and_holds_none_of_the_callers_files(tmp_path: Path) -> None:
    """The run driver forks its sampler (no new interpreter): it keeps none of the driver's open files (a GPU lock
    held open would outlive the driver with it), and writes what a spawned one writes."""
    lock = (tmp_path / "gpu0.lock").open("w")
    try:
        handle = start_sampler(tmp_path / "telemetry", hz=20.0, backend="none", flush_every_s=0.1, fork=True)
        assert handle.status == "running" and handle.proc is not None
        held = {os.readlink(f) for f in Path(f"/proc/{handle.proc.pid}/fd").iterdir()}
        assert str(tmp_path / "gpu0.lock") not in held
        _wait_for_samples(tmp_path / "telemetry", 2)
        handle.stop()
        assert handle.proc.returncode == 0
    finally:
        lock.close()
    samples, complete = read_samples(tmp_path / "telemetry")
    assert complete and samples.num_rows >= 2 and read_sidecar(tmp_path / "telemetry")["status"] == "complete"


def test_killed_sampler_leaves_nothing_that_looks_complete(tmp_path: Path) -> None:
    start = int(time.time() * 1e3)  # before the sampler starts: every sample it flushes is in the window
    handle = start_sampler(tmp_path, hz=20.0, backend="none", flush_every_s=0.2)
    assert handle.status == "running" and handle.proc is not None
    _wait_for_samples(tmp_path, 5)
    handle.proc.kill()
    handle.proc.wait(10)
    stop = int(time.time() * 1e3)
    assert not (tmp_path / SAMPLES).exists()
    assert [p.name for p in tmp_path.glob(f"*{CHUNK_SUFFIX}")] == []
    side = read_sidecar(tmp_path)
    assert side is not None and side["status"] == "running"
    assert list((tmp_path / CHUNKS).glob(f"*{CHUNK_SUFFIX}"))  # what reached disk is still there, as chunks
    s = summarize(tmp_path, start, stop)
    assert s["partial"] and any("did not finish" in r for r in s["reasons"])
    assert s["host"]["samples"] >= 5
    handle.stop()  # on a dead sampler: a no-op that must not raise


def test_a_sampler_that_cannot_start_is_recorded_not_raised(tmp_path: Path) -> None:
    handle = start_sampler(tmp_path, hz=0.0, backend="none")  # 1/hz fails inside the sampler
    assert handle.status.startswith("failed: sampler failed: ZeroDivisionError")
    handle.stop()
    s = summarize(tmp_path, 0, 1000)
    assert s["partial"] and any("ZeroDivisionError" in r for r in s["reasons"])


def test_replayed_mig_selection_in_the_real_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mig = "MIG-2222bbbb-0000-0000-0000-000000000000"
    trace = {"devices": [gpu_trace(GPU_A, seconds=60), gpu_trace(GPU_B, seconds=60, mig_uuids=(mig,))]}
    (tmp_path / "trace.json").write_text(json.dumps(trace))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mig)
    out = tmp_path / "out"
    handle = start_sampler(out, hz=20.0, backend=f"replay:{tmp_path / 'trace.json'}", host=False, flush_every_s=0.2)
    assert handle.status == "running"
    start = int(time.time() * 1e3)
    _wait_for_samples(out, 30)  # 1.5 s of samples at least: the energy is compared over the window
    stop = int(time.time() * 1e3)
    handle.stop()
    s = summarize(out, start, stop)
    assert [g["uuid"] for g in s["gpus"]] == [GPU_B]
    assert s["gpus"][0]["selected_mig"] == [mig]
    assert s["gpus"][0]["energy_counter_j"] == pytest.approx(200.0 * (stop - start) / 1e3, rel=0.1)
    assert any("parent GPU" in n for n in s["notes"])
    assert not s["partial"], s["reasons"]


def test_nvml_field_values_are_checked_one_by_one() -> None:
    import pynvml

    fv = pynvml.c_nvmlFieldValue_t()
    fv.fieldId, fv.valueType = 83, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    fv.nvmlReturn = pynvml.NVML_SUCCESS
    fv.value.ullVal = 123_456_789_012
    assert field_value(fv) == 123_456_789_012
    fv.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert field_value(fv) is None  # missing, not 0
    fv.nvmlReturn = pynvml.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(DeviceLost):
        field_value(fv)
    fv.nvmlReturn, fv.valueType, fv.value.dVal = pynvml.NVML_SUCCESS, pynvml.NVML_VALUE_TYPE_DOUBLE, 2.5
    assert field_value(fv) == 2.5
