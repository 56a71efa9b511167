"""Telemetry of a run over several nodes, merged: per host energy and peak memory, the total, a failed node named.

The nodes' samplers are replayed here (virtual clock, recorded GPU traces) into the folders the real ones write;
tests/test_slurm_telemetry.py starts them for real on two Slurm nodes.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mlrepro.report.render import environment
from mlrepro.report.telemetry import telemetry_charts
from mlrepro.telemetry import summarize
from mlrepro.telemetry.launch import sampler_env, start_sampler
from mlrepro.telemetry.merge import merge
from mlrepro.telemetry.nodes import _announced, start_for_run, start_on_nodes
from mlrepro.telemetry.series import series
from mlrepro.telemetry.store import NODES, NODES_DIR, SUMMARY, host_folder, read_sidecar

sys.path.insert(0, str(Path(__file__).parent))
from test_telemetry_replay import GPU_A, GPU_B, WALL0, gpu_trace, run_replay, true_energy_j

START, STOP = WALL0 + 2_000, WALL0 + 20_000  # a window across the trace's step from 200 W to 400 W


def two_nodes(out: Path, status: dict[str, str] | None = None) -> Path:
    """The batch host's samples of GPU A in ``out``, node-b's of GPU B in out/nodes/node-b, and the record of the
    nodes expected (node-b, and node-c whose sampler wrote nothing)."""
    run_replay(out, {"devices": [gpu_trace(GPU_A, seconds=25)]}, 25, host=True)
    run_replay(out / NODES_DIR / "node-b", {"devices": [gpu_trace(GPU_B, seconds=25)]}, 25, host=True)
    (out / NODES).write_text(json.dumps({"hosts": ["node-b", "node-c"], "status": status or {
        "node-b": "running", "node-c": "failed: srun exited with code 1: srun: error: node-c: task 1: Exited"}}))
    return out


def test_the_nodes_are_merged_per_host_with_the_total(tmp_path: Path) -> None:
    out = two_nodes(tmp_path)
    s = summarize(out, START, STOP)
    assert json.loads((out / SUMMARY).read_text()) == s
    hosts = {h["host"]: h for h in s["hosts"]}
    assert [h["host"] for h in s["hosts"]] == [socket.gethostname(), "node-b", "node-c"]
    truth = true_energy_j(START - WALL0, STOP - WALL0)
    for name in (socket.gethostname(), "node-b"):
        assert hosts[name]["accelerator_energy_j"] == pytest.approx(truth, rel=0.01)
        assert not hosts[name]["partial"] and hosts[name]["sampler"] == "complete" and hosts[name]["gpus"] == 1
        assert hosts[name]["peak_gpu_mem_used_mb"] == 1024.0  # the trace's 2**30 bytes
        assert hosts[name]["peak_host_mem_used_mb"] > 0
    # node-b's own summary is in its folder; its GPU is tagged with its host in the run's
    own = json.loads((out / NODES_DIR / "node-b" / SUMMARY).read_text())
    assert own["accelerator_energy_j"] == hosts["node-b"]["accelerator_energy_j"] and "hosts" not in own
    assert sorted((g["host"], g["uuid"]) for g in s["gpus"]) == [("node-b", GPU_B), (socket.gethostname(), GPU_A)]
    # node-c is named, and with a node unknown there is no total
    c = hosts["node-c"]
    assert c["partial"] and c["sampler"] == "never started" and c["accelerator_energy_j"] is None
    assert "node node-c: sampler did not start: srun exited with code 1: srun: error: node-c: task 1: Exited" \
        in s["reasons"], s["reasons"]
    assert "node node-c: no telemetry: its sampler wrote nothing" in s["reasons"]
    assert s["partial"] and s["accelerator_energy_j"] is None


def test_the_total_is_the_sum_of_the_hosts(tmp_path: Path) -> None:
    out = two_nodes(tmp_path)
    (out / NODES).write_text(json.dumps({"hosts": ["node-b"], "status": {"node-b": "running"}}))
    s = summarize(out, START, STOP)
    assert [h["host"] for h in s["hosts"]] == [socket.gethostname(), "node-b"]
    assert s["accelerator_energy_j"] == pytest.approx(sum(h["accelerator_energy_j"] for h in s["hosts"]), abs=1e-3)
    assert s["accelerator_energy_j"] == pytest.approx(2 * true_energy_j(START - WALL0, STOP - WALL0), rel=0.01)
    assert not s["partial"], s["reasons"]


def test_one_node_keeps_its_summary_and_gains_one_host(tmp_path: Path) -> None:
    run_replay(tmp_path, {"devices": [gpu_trace(GPU_A, seconds=25), gpu_trace(GPU_B, seconds=25)]}, 25, host=True)
    s = summarize(tmp_path, START, STOP)
    assert [h["host"] for h in s["hosts"]] == [socket.gethostname()]
    assert s["hosts"][0]["accelerator_energy_j"] == s["accelerator_energy_j"] == pytest.approx(
        sum(g["energy_j"] for g in s["gpus"]), abs=1e-3)
    assert {g["host"] for g in s["gpus"]} == {socket.gethostname()} and not s["partial"]


def test_a_node_that_failed_at_start_is_named_once(tmp_path: Path) -> None:
    why = "sampler failed: ValueError: no trace"
    summary = {"gpus": [], "accelerator_energy_j": 5.0, "reasons": [], "partial": False,
               "sampler": {"status": "complete"}}
    failed = {"gpus": [], "accelerator_energy_j": None, "reasons": [why], "partial": True,
              "sampler": {"status": "failed"}}
    s = merge(summary, "a", {"hosts": ["b"], "status": {"b": f"failed: {why}"}}, {"b": failed})
    assert s["reasons"] == [f"node b: {why}"] and s["hosts"][1]["sampler"] == "failed"
    assert s["accelerator_energy_j"] is None and s["partial"]


def test_a_node_name_that_is_no_folder_name_is_named_not_followed(tmp_path: Path) -> None:
    out = two_nodes(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (out / NODES).write_text(json.dumps({"hosts": ["../elsewhere"], "status": {"../elsewhere": "running"}}))
    s = summarize(out, START, STOP)
    assert "node ../elsewhere: no telemetry: its sampler wrote nothing" in s["reasons"]
    assert not (tmp_path / "elsewhere" / SUMMARY).exists()
    with pytest.raises(ValueError, match="not a plain name"):
        host_folder("..")


def test_an_unreadable_nodes_record_is_a_reason(tmp_path: Path) -> None:
    out = two_nodes(tmp_path)
    (out / NODES).write_text('{"hosts": [')
    s = summarize(out, START, STOP)
    assert s["partial"] and any(r.startswith(f"{NODES} is unreadable") for r in s["reasons"])


def test_each_samplers_word_is_read_by_host() -> None:
    lines = [b'{"status": "running", "nvml": "ok", "host": "n1"}', b"srun: warning: something",
             b'{"status": "failed", "reason": "no trace", "host": "n2"}']
    assert _announced(lines) == {"n1": "running", "n2": "failed: no trace"}


def test_outside_slurm_a_run_has_no_other_nodes(tmp_path: Path) -> None:
    assert start_for_run(tmp_path, {}, 2, 10.0) is None
    assert start_for_run(tmp_path, {"SLURM_JOB_ID": "1"}, 1, 10.0) is None
    assert not (tmp_path / NODES).exists()


def test_a_step_that_cannot_start_names_each_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No srun on PATH: each node expected is named with the reason, and stopping is a no-op."""
    monkeypatch.setenv("PATH", str(tmp_path))
    handle = start_on_nodes(tmp_path, "7", ["n1", "n2"], 10.0, ready_timeout_s=5)
    record = json.loads((tmp_path / NODES).read_text())
    assert record["hosts"] == ["n1", "n2"]
    assert all(record["status"][n].startswith("failed: could not start the samplers: FileNotFoundError")
               for n in ("n1", "n2")), record
    handle.stop()


def test_a_new_run_clears_the_previous_runs_nodes(tmp_path: Path) -> None:
    two_nodes(tmp_path)
    handle = start_sampler(tmp_path, hz=0.0, backend="none")  # fails at once; what matters is what it cleared
    handle.stop()
    assert not (tmp_path / NODES).exists() and not (tmp_path / NODES_DIR).exists()


def test_the_report_shows_each_node(tmp_path: Path) -> None:
    out = two_nodes(tmp_path / "run" / "telemetry")
    s = summarize(out, START, STOP)
    table = environment().get_template("telemetry_nodes.html.j2")
    html = table.render(r={"telemetry": s})
    for name in (socket.gethostname(), "node-b", "node-c"):
        assert f"<tr><td>{name}" in html
    assert f'{s["hosts"][1]["accelerator_energy_j"]}</td>' in html
    assert "never started: sampler did not start: srun exited with code 1" in html and "— (a node unknown)" in html
    assert "<table>" not in table.render(r={"telemetry": {**s, "hosts": s["hosts"][:1]}})  # one node: no table
    assert "<table>" not in table.render(r={"telemetry": {"reasons": ["summary failed"]}})  # nor without hosts
    run = {"run_start_ms": START, "run_stop_ms": STOP, "telemetry": s}
    titles = [str(c) for c in telemetry_charts(tmp_path / "run", run)]
    assert sum("on node-b" in t for t in titles) == 4 and not any("node-c" in t for t in titles)  # host CPU, 3 GPU


def test_a_nodes_sampler_writes_its_own_folder_and_stops_on_sigusr1(tmp_path: Path) -> None:
    """As srun starts it on another node: --host-dir, and SIGUSR1 (which srun forwards) stops it cleanly."""
    proc = subprocess.Popen([sys.executable, "-m", "mlrepro.telemetry.sampler", "--out-dir", str(tmp_path),
                             "--host-dir", "--hz", "20", "--backend", "none", "--flush-every-s", "0.2"],
                            stdout=subprocess.PIPE, env=sampler_env())
    assert proc.stdout is not None
    said = json.loads(proc.stdout.readline())
    assert said["status"] == "running" and said["host"] == socket.gethostname()
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(30) == 0
    folder = tmp_path / socket.gethostname()
    assert (read_sidecar(folder) or {})["status"] == "complete"
    assert series(folder)["hostname"] == socket.gethostname()
