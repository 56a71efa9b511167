"""Telemetry on every node of a run over two nodes of a real Slurm cluster (`SLURM_NODES=2 .ci/slurm.sh start`).

The run driver samples its own node; one srun step inside the run's allocation starts a sampler on the other
node. GPUs are the one fake (no GPU here): each node's sampler replays its own node's NVML trace (a constant
power, different on each node), picked by its real host name, so each node's energy tells whose samples it is.
Slurm's own record (sacct's steps) says where the samplers ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mlrepro.telemetry.series import series
from mlrepro.telemetry.store import SAMPLES
from tests import test_slurm
from tests.conftest import REPO, mini_launch
from tests.test_slurm_multinode import sbatch, steps, two_nodes

pytestmark = [pytest.mark.slurm, pytest.mark.integration]
cluster = test_slurm.cluster
__all__ = ["cluster", "two_nodes"]  # fixtures, shared with the Slurm tests
WATTS = (150.0, 350.0)  # the first node's GPU, the second's


def constant_gpu(uuid: str, watts: float, seconds: float = 900.0) -> dict[str, Any]:
    """A recorded GPU at a constant power; its energy counter steps every 100 ms."""
    samples = [{"t_ms": float(t), "power_instant_mw": watts * 1e3, "power_average_mw": watts * 1e3,
                "energy_mj": int(watts * t), "util_gpu_pct": 80.0, "sm_clock_mhz": 1700,
                "mem_used_bytes": int(watts) * 2**20, "mem_total_bytes": 2**34, "temperature_c": 55}
               for t in np.arange(0.0, seconds * 1000 + 1, 100.0)]
    return {"uuid": uuid, "name": "Replayed GPU", "power_limit_mw": 700_000, "samples": samples}


def gpu_uuid(host: str) -> str:
    return f"GPU-{host}"


def dlrm_run(tmp: Path, trace: dict[str, Any]) -> tuple[str, int, Path]:
    """One dlrm run over both nodes with telemetry at 10 Hz, each node's GPUs replayed from ``trace``."""
    params = yaml.safe_load((REPO / "minis" / "dlrm" / "defaults.yaml").read_text())
    params.update(max_epochs=3, target=0.999, data={**params["data"], "train_samples": 16384, "eval_samples": 512})
    subprocess.run([sys.executable, "-m", "mlrepro.datasets.generated", "--benchmark", "dlrm", "--out",
                    str(tmp / "data"), "--params", json.dumps(params), "--seed", "3"], check=True, capture_output=True)
    (tmp / "trace.json").write_text(json.dumps(trace))
    run_dir = tmp / "run"
    driver = [sys.executable, *mini_launch("dlrm", params, tmp / "data", tmp, nodes=2), "--seed", "5",
              "--run-dir", str(run_dir), "--telemetry-hz", "10", "--telemetry-backend", f"replay:{tmp / 'trace.json'}"]
    job_id, code = sbatch(tmp, driver)
    assert code == 0, (tmp / "job.out").read_text()[-3000:] + (run_dir / "train.log").read_text()[-3000:]
    return job_id, code, run_dir


def hostnames(node_list: str) -> list[str]:
    return subprocess.run(["scontrol", "show", "hostnames", node_list], capture_output=True, text=True,
                          check=True).stdout.split()


def test_each_node_samples_its_own_gpus(two_nodes: list[str], tmp_path: Path) -> None:
    trace = {"hosts": {h: {"devices": [constant_gpu(gpu_uuid(h), w)]} for h, w in zip(two_nodes, WATTS, strict=False)}}
    job_id, _, run_dir = dlrm_run(tmp_path, trace)
    run = json.loads((run_dir / "run.json").read_text())
    first, second = hostnames(run["slurm"]["node_list"])
    tel = run["telemetry"]
    # the run's summary file is the one in run.json
    assert json.loads((run_dir / "telemetry" / "summary.json").read_text()) == tel
    assert [h["host"] for h in tel["hosts"]] == [first, second], tel["hosts"]
    window_s = (run["run_stop_ms"] - run["run_start_ms"]) / 1e3
    watts = dict(zip(two_nodes, WATTS, strict=False))
    for h in tel["hosts"]:
        assert not h["partial"] and h["sampler"] == "complete", h
        assert h["gpus"] == 1
        # each node's energy is its own GPU's: its power over the run window
        assert h["accelerator_energy_j"] == pytest.approx(watts[h["host"]] * window_s, rel=0.05, abs=1.0), (h, window_s)
        assert h["peak_gpu_mem_used_mb"] == int(watts[h["host"]])
        assert h["peak_host_mem_used_mb"] and h["peak_host_mem_used_mb"] > 0
    assert tel["accelerator_energy_j"] == pytest.approx(sum(h["accelerator_energy_j"] for h in tel["hosts"]), abs=1e-3)
    assert sorted((g["host"], g["uuid"]) for g in tel["gpus"]) == sorted((h, gpu_uuid(h)) for h in (first, second))
    assert not tel["partial"], tel["reasons"]
    # each node's own series, in its own folder, from its own sampler
    own = {first: run_dir / "telemetry", second: run_dir / "telemetry" / "nodes" / second}
    for host, folder in own.items():
        data = series(folder, run["run_start_ms"], run["run_stop_ms"])
        assert list(data["gpus"]) == [gpu_uuid(host)] and data["complete"]
        assert set(data["gpus"][gpu_uuid(host)]["power_w"]) == {watts[host]}
        assert data["host"] and len(data["host"]["time_ms"]) >= 0.5 * 10 * window_s
        assert data["hostname"] == host
    assert json.loads((own[second] / "summary.json").read_text())["accelerator_energy_j"] == \
        tel["hosts"][1]["accelerator_energy_j"]
    # Slurm's record: beside the ranks' step (one task on each node), a step of one task on the second node
    assert (second, "1") in steps(job_id).values(), steps(job_id)


def test_a_node_whose_sampler_fails_is_named(two_nodes: list[str], tmp_path: Path) -> None:
    """The second node has no trace to replay: its sampler fails at start there; the run goes on and its summary
    names the node."""
    first = two_nodes[0]
    trace = {"hosts": {first: {"devices": [constant_gpu(gpu_uuid(first), WATTS[0])]}}}
    _, _, run_dir = dlrm_run(tmp_path, trace)
    run = json.loads((run_dir / "run.json").read_text())
    first, second = hostnames(run["slurm"]["node_list"])
    tel = run["telemetry"]
    assert [h["host"] for h in tel["hosts"]] == [first, second]
    assert not tel["hosts"][0]["partial"] and tel["hosts"][0]["accelerator_energy_j"] > 0
    failed = tel["hosts"][1]
    assert failed["partial"] and failed["sampler"] == "failed" and failed["accelerator_energy_j"] is None, failed
    assert any(r.startswith(f"node {second}: ") and f"no host '{second}'" in r for r in tel["reasons"]), tel["reasons"]
    assert tel["partial"] and tel["accelerator_energy_j"] is None  # a total without a node is no total



def assert_per_node_telemetry(out: Path, run_dir: Path) -> None:
    """A pipeline's run over two nodes (tests/test_slurm_multinode.py, test_pipeline_with_a_two_node_run): its
    telemetry names the two hosts of its Slurm job (no GPU here: no energy, and each node says so), each with its
    own samples, and the report shows them per node."""
    run = json.loads((run_dir / "run.json").read_text())
    hosts = hostnames(run["slurm"]["node_list"])
    tel = run["telemetry"]
    assert [h["host"] for h in tel["hosts"]] == hosts and len(hosts) == 2, tel.get("hosts")
    for h in tel["hosts"]:
        assert h["sampler"] == "complete" and h["peak_host_mem_used_mb"] > 0, h
        assert h["accelerator_energy_j"] is None and any("no NVML" in r for r in h["reasons"]), h
    assert (run_dir / "telemetry" / "nodes" / hosts[1] / SAMPLES).is_file()
    report = (out / "report.html").read_text()
    table = report[report.index("<th>Node</th>"):]
    table = table[:table.index("</table>")]
    assert all(f"<tr><td>{h}" in table for h in hosts) and "all 2 nodes" in table, table
