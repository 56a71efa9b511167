"""A simulated GPU cluster (issue 33): a vendor-shaped implementation folder runs as its own run.sub runs it, on a
real 2-node Slurm whose nodes have 4 GPUs each as GRES (`SLURM_NODES=2 .ci/slurm.sh start`), through
`snakemake --profile profiles/slurm`, planned on this host, which has no GPU.

The folder (tests/fixtures/vendor_gpu) is in NVIDIA's form: run.sub imports the container on every node, clears
the page cache on every node and logs `cache_clear` from inside the container, then starts DGXNGPU ranks per node
in it with the mounts of its mounts.txt and its workdir; run_and_time.sh trains the mini ResNet on CPU, one
process per rank, each naming the GPU it would use (its local rank's of the CUDA_VISIBLE_DEVICES Slurm gave the
step). GPUs, NVML and pyxis are what this machine lacks: the GPUs are Slurm's GRES of device files of their own,
NVML is the replay backend with a trace per host, and pyxis is the test stand-in of tests/pyxis_standin (a mount
namespace per task; no image). Everything else is real: Slurm, its accounting, srun --mpi=pmix, the ranks'
rendezvous over the nodes' network, the official compliance checker.

Slurm's own records (sacct's job steps and their GRES) and the stand-in's per-node records say what ran where,
not the pipeline's word. One Snakemake run holds both runs (a system of one node and one of two), so that the
test costs one pipeline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import test_slurm
from tests.conftest import REPO, require
from tests.test_slurm import sacct_until, snakemake_slurm, write_config
from tests.test_slurm_multinode import two_nodes
from tests.test_slurm_telemetry import constant_gpu, hostnames

pytestmark = [pytest.mark.slurm, pytest.mark.integration]
cluster, plugin = test_slurm.cluster, test_slurm.plugin
__all__ = ["cluster", "two_nodes"]  # fixtures, shared with the Slurm tests
FOLDER = REPO / "tests" / "fixtures" / "vendor_gpu"
STANDIN = REPO / "tests" / "pyxis_standin" / "bin"
GPUS = 4  # per node: .ci/slurm.sh's MLREPRO_SLURM_GPUS default, the fixture's DGXNGPU
SYSTEMS = {"sim1": ("config_SIMGPU_1x4.sh", 1), "sim2": ("config_SIMGPU_2x4.sh", 2)}
CONT = "nvcr.io/nvidia/pytorch:24.09-py3"  # imported once per system by the stand-in's enroot, which has no image
# the fixture's dataset: mlrepro's generated ResNet data with the fixture's NUMCLASSES (config_SIMGPU_common.sh)
DATA = {"classes": 2, "image_size": 8, "train_samples": 256, "eval_samples": 64, "noise": 0.1}


@pytest.fixture(scope="module")
def gpu_nodes(two_nodes: list[str]) -> list[str]:
    """The cluster's nodes, each with GPUS GPUs as Slurm's GRES."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %G"], capture_output=True, text=True, check=True).stdout
    gres = dict(line.split(None, 1) for line in out.splitlines())
    require(all(gres.get(n, "").strip() == f"gpu:{GPUS}" for n in two_nodes),
            f"needs nodes with GRES gpu:{GPUS} (found {gres}): `SLURM_NODES=2 .ci/slurm.sh start`")
    return two_nodes


def planning_host_gpus() -> int:
    """What NVML sees on this host (the one that plans): no driver here, so none."""
    from mlrepro.runs.accelerators import machine_gpus

    return machine_gpus()


def rank_records(run_dir: Path) -> list[dict[str, Any]]:
    return sorted((json.loads(p.read_text()) for p in (run_dir / "ranks").glob("rank*.json")),
                  key=lambda r: r["rank"])


def standin_steps(state: Path, job_id: str) -> list[dict[str, Any]]:
    """The pyxis stand-in's record of each container task of the job, on every node."""
    return [rec for f in sorted(state.glob("*/steps.jsonl")) for rec in map(json.loads, f.read_text().splitlines())
            if rec["job"] == job_id]


def sacct_steps(job_id: str) -> list[tuple[str, str, int, str]]:
    """sacct's record of the job's numbered steps: (step, node list, tasks, allocated TRES), in their order."""
    out = subprocess.run(["sacct", "-P", "-n", "-j", job_id, "-o", "JobID,NodeList,NTasks,AllocTRES"],
                         capture_output=True, text=True, check=True).stdout
    rows = [row.split("|") for row in out.splitlines() if row]
    return [(r[0], r[1], int(r[2] or 0), r[3]) for r in rows if r[0].split(".")[-1].isdigit() and "." in r[0]]


def test_vendor_folder_on_a_simulated_gpu_cluster(gpu_nodes: list[str], plugin: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert planning_host_gpus() == 0, "the planning host must have no GPU for this test to mean anything"
    # the datasets the folder mounts: a marker in each says which folder a rank sees at /data and /extra
    params = yaml.safe_load((REPO / "workflows" / "resnet" / "defaults.yaml").read_text())
    params["data"].update(DATA)
    data, extra = tmp_path / "data", tmp_path / "extra"
    subprocess.run([sys.executable, "-m", "mlrepro.datasets.generated", "--benchmark", "resnet", "--out", str(data),
                    "--params", json.dumps(params), "--seed", "3"], check=True, capture_output=True, timeout=300)
    extra.mkdir()
    markers = {"/data": f"data of {tmp_path.name}\n", "/extra": f"extra of {tmp_path.name}\n"}
    (data / "MARKER").write_text(markers["/data"])  # beside the manifest: the training checks only what it lists
    (extra / "MARKER").write_text(markers["/extra"])
    # each host's NVML: 4 replayed GPUs of its own
    trace = {"hosts": {h: {"devices": [constant_gpu(f"GPU-{h}-{i}", 100.0 + i, seconds=60) for i in range(GPUS)]}
                       for h in gpu_nodes}}
    (tmp_path / "trace.json").write_text(json.dumps(trace))
    state = tmp_path / "pyxis"
    state.mkdir(mode=0o700)
    # the stand-in's srun first on the PATH of Snakemake, so of every job and step; the venv's python is "the image's"
    monkeypatch.setenv("PATH", os.pathsep.join([str(STANDIN), str(Path(sys.executable).parent), os.environ["PATH"]]))
    monkeypatch.setenv("MLREPRO_PYXIS_STANDIN_STATE", str(state))
    write_config(tmp_path, {
        "only": ["resnet"], "allow_fewer_runs": True, "engine": "enroot", "ruleset": "1.1.0",
        "inference": {"benchmarks": []},
        "slurm": {"account": "root"},
        "telemetry": {"enabled": True, "hz": 1, "backend": f"replay:{tmp_path / 'trace.json'}"},
        "systems": {name: {"config_files": {"resnet": config}} for name, (config, _) in SYSTEMS.items()},
        "benchmarks": {"resnet": {
            "runs": 1, "implementation": str(FOLDER), "image": CONT, "data_dir": str(data),
            # the folder's second data mount (mounts.txt), and run.sub's cache clearing as root without sudo
            "env": {"EXTRADIR": str(extra), "DROPCACHE_CMD": "/sbin/sysctl vm.drop_caches=3"}}},
    })
    # every stage: the runs, the compliance gate, the package (one run each: not submittable), score and report
    proc = snakemake_slurm(plugin, tmp_path)
    assert proc.returncode == 0, proc.stderr[-8000:]
    assert (tmp_path / "results" / "report.html").is_file()

    out = tmp_path / "results"
    for system, (_, nodes) in SYSTEMS.items():
        run_dir = out / "runs" / system / "resnet" / "0"
        run = json.loads((run_dir / "run.json").read_text())
        job_id = run["slurm"]["job_id"]
        hosts = hostnames(run["slurm"]["node_list"])
        assert len(hosts) == nodes and set(hosts) <= set(gpu_nodes), run["slurm"]
        assert sacct_until([job_id], {"COMPLETED"})[job_id].state == "COMPLETED"
        where = f"{system} (job {job_id} on {hosts})"

        # The allocation: GPUS GPUs on each node, from Slurm; the planning host's count (0) reached no run.
        assert run["gpus"] == list(range(GPUS)), (where, run["gpus"])
        alloc = subprocess.run(["sacct", "-X", "-P", "-n", "-j", job_id, "-o", "AllocTRES"], capture_output=True,
                               text=True, check=True).stdout
        assert f"gres/gpu={nodes * GPUS}" in alloc, (where, alloc)

        # Slurm's steps, in run.sub's order: mkdir and the container import on each node, the cache cleared on each
        # node and logged from the container, then one step of DGXNGPU ranks per node.
        # (The telemetry samplers of the other nodes are steps of one task beside them.)
        recorded = sacct_steps(job_id)
        train = [i for i, (_, _, n, _) in enumerate(recorded) if n == nodes * GPUS]
        assert len(train) == 1, (where, recorded)
        _, train_nodes, _, train_tres = recorded[train[0]]
        assert hostnames(train_nodes) == hosts and f"gres/gpu={nodes * GPUS}" in train_tres, (where, recorded)
        before = [n for _, _, n, _ in recorded[:train[0]] if nodes == 1 or n > 1]
        assert before[-4:] == [nodes] * 4, (where, recorded)

        # Each rank: its own GPU, the local rank-th of the GPUs Slurm gave its node; DGXNGPU ranks per node.
        ranks = rank_records(run_dir)
        assert [r["rank"] for r in ranks] == list(range(nodes * GPUS)), (where, ranks)
        for host in hosts:
            mine = [r for r in ranks if r["host"] == host]
            assert sorted(r["gpu"] for r in mine) == [str(i) for i in range(GPUS)], (where, host, mine)
            assert all(r["gpu"] == str(r["local_rank"]) and r["cuda_visible_devices"] == "0,1,2,3"
                       and r["tasks_per_node"] == str(GPUS) and r["ntasks"] == nodes * GPUS for r in mine), mine
            # every declared mount is there, from the folder the config named; the workdir is run.sub's
            assert all(r["markers"]["/data"] == markers["/data"] and r["markers"]["/extra"] == markers["/extra"]
                       for r in mine), (where, mine)
            assert all(r["cwd"] == str(FOLDER) for r in mine), mine

        # The stand-in's record: the container made once on each node from CONT (the system's .sqsh of the registry
        # image), then used by name with mounts.txt's
        # mounts (the run's own folder at /results), by the cache_clear step and every rank.
        records = standin_steps(state, job_id)
        made = [r for r in records if r["made"]]
        sqsh = out / "sqsh" / system / "nvcr.io+nvidia+pytorch+24.09-py3.sqsh"  # CONT: the system's import of it
        assert sorted(r["host"] for r in made) == hosts and {r["image"] for r in made} == {str(sqsh)}, (where, made)
        ranks_steps = [r for r in records if r["command"] == ["./run_and_time.sh"]]
        assert len(ranks_steps) == nodes * GPUS, (where, records)
        assert all(r["mounts"] == [[str(data), "/data", False], [str(extra), "/extra", False],
                                   [str(run_dir), "/results", False]] for r in ranks_steps), ranks_steps
        assert {r["name"] for r in records} == {f"sim_image_classification_{job_id}"}

        # cache_clear: the page cache cleared on each node, then logged from the container (once per node, as run.sub
        # does); the result passed the official checker.
        log = (run_dir / "train.log").read_text()
        assert sorted(line.split()[-1] for line in log.splitlines() if line.startswith("Clearing cache on ")) == \
            hosts, log[-3000:]
        result = (run_dir / "result.txt").read_text().splitlines()
        clears = [json.loads(line.removeprefix(":::MLLOG ")) for line in result if '"key": "cache_clear"' in line]
        assert [c["value"] for c in clears[:nodes]] == [True] * nodes, clears
        assert sum('"key": "run_start"' in line for line in result) == 1  # rank 0 alone logs the run
        verdict = json.loads((out / "compliance" / system / "resnet" / "0.json").read_text())
        assert verdict["valid"], verdict

        # NVML of each node: its own 4 replayed GPUs
        tel = run["telemetry"]
        assert [h["host"] for h in tel["hosts"]] == hosts, tel.get("hosts")
        assert all(h["gpus"] == GPUS for h in tel["hosts"]), tel["hosts"]
        assert sorted(g["uuid"] for g in tel["gpus"]) == sorted(f"GPU-{h}-{i}" for h in hosts for i in range(GPUS))
    # the two runs were two jobs
    assert len({json.loads((out / "runs" / s / "resnet" / "0" / "run.json").read_text())["slurm"]["job_id"]
                for s in SYSTEMS}) == 2
