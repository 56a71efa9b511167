"""A simulated GPU cluster (issues 33 and 42): NVIDIA's own run.sub files, unmodified, end to end on the real 2-node
Slurm whose nodes have 4 GPUs each as GRES of device files of their own (`SLURM_NODES=2 .ci/slurm.sh start`),
planned on this host, which has no GPU. GPUs, NVML, pyxis/enroot and the image are what this machine lacks; NVML is
the replay backend with a trace per host; everything else is real: Slurm, its accounting, srun --mpi=pmix, the
ranks' rendezvous over the nodes' network, the official compliance checker.

Folders of NVIDIA's Training v1.1 and v4.1 results (``../shared/data``), unpacked as published, run through
``snakemake --profile profiles/slurm``: each run is one experiment of the folder's run.sub, run as sbatch runs it
(mlrepro.runs.driver: in the allocation, with the batch script's Slurm variables, from its folder). run.sub, its
config files and every other file of the folder stay byte-identical to the tarball's (checked after the runs).
Only the image is a stand-in: a container root (tests/fixtures/nvidia_image) whose /workspace holds a
run_and_time.sh that trains our mini of the benchmark on CPU, for the pyxis stand-in (tests/pyxis_standin), which
also gives the nodes sudo and enroot; run.sub's fixed `sleep 30`s last 1 second (tests/pyxis_standin/quick).

The config is a submitter's for nodes of 4 GPUs: the config file as published, ``systems.<name>.env`` with
DGXNGPU (and DGXNNODES for a config file of more nodes than the system has), the mounts' variables, and
MASTER_PORT (run.sub's default, 29500, may be taken on the shared test nodes).

What ran is checked from Slurm's records (sacct: steps, tasks, GRES) and from the ranks and the stand-in's own
records, not from the pipeline's word: the container imported once on each node from CONT, run.sub's mounts at
their places, DGXNGPU ranks per node each on its own GPU (its local rank's of the step's), the page cache cleared on
each node and cache_clear logged, the batch script's variables (run.sub's :::DLPAL line), and, where run.sub finds
its folder through `scontrol show job` (v4.1), that folder. The results pass the official compliance checker.
One Snakemake run per round (the compliance rules are the round's).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
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
DATA = REPO.parent / "shared" / "data"
STANDIN = REPO / "tests" / "pyxis_standin"
IMAGE = REPO / "tests" / "fixtures" / "nvidia_image"
GPUS = 4  # per node: .ci/slurm.sh's MLREPRO_SLURM_GPUS default


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


def unpack(tarball: Path, folders: list[str], out: Path) -> dict[str, bytes]:
    """The implementation folders ``folders`` of ``tarball`` into ``out``, as published; each file's bytes."""
    require(tarball.is_file(), f"{tarball} is absent")
    published = {}
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if any(m.name.startswith(f + "/") for f in folders)]
        tar.extractall(out, members=members, filter="data")
        for m in members:
            if m.isfile():
                published[m.name] = tar.extractfile(m).read()  # type: ignore[union-attr]
    return published


def unchanged(out: Path, published: dict[str, bytes]) -> list[str]:
    """The published files that are no longer byte-identical (or are gone) after the runs."""
    return [name for name, data in published.items()
            if not (out / name).is_file() or hashlib.sha256((out / name).read_bytes()).digest()
            != hashlib.sha256(data).digest()]


def dataset(benchmark: str, out: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Our mini's dataset of ``benchmark`` at ``out`` (as the pipeline generates it), and its params."""
    params = yaml.safe_load((REPO / "minis" / benchmark / "defaults.yaml").read_text())
    params["data"].update(data)
    subprocess.run([sys.executable, "-m", "mlrepro.datasets.generated", "--benchmark", benchmark, "--out", str(out),
                    "--params", json.dumps(params), "--seed", "3"], check=True, capture_output=True, timeout=300)
    (out / "MARKER").write_text(f"data of {out}\n")  # beside the manifest: the training checks only what it lists
    return params


def image(root: Path, workdir: str, benchmark: str, data_mount: str, mounts: list[str], params: dict[str, Any],
          folder: Path) -> Path:
    """A container root for the pyxis stand-in, as NVIDIA's Dockerfile makes the image: the folder's code at the
    WORKDIR (here: the stand-in's run_and_time.sh and loggers, and the folder's cont-mount-info.json), and the
    image's tools; its environment names our mini."""
    shutil.copytree(IMAGE / "image", root / "image")
    work = root / workdir.lstrip("/")
    shutil.copytree(IMAGE / "workspace", work)
    if (folder / "cont-mount-info.json").is_file():
        shutil.copy(folder / "cont-mount-info.json", work)
    (work / "params.json").write_text(json.dumps(params))
    path = os.pathsep.join(["/image/bin", str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin",
                            "/usr/sbin", "/sbin"])
    (root / "image.json").write_text(json.dumps({"workdir": workdir, "env": {
        "PATH": path, "PYTHONPATH": "/image/python", "MLREPRO_IMAGE_BENCHMARK": benchmark,
        "MLREPRO_IMAGE_DATA": data_mount, "MLREPRO_IMAGE_MOUNTS": ",".join(mounts)}}))
    return root


def run_pipeline(plugin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, images: dict[str, Path],
                 config: dict[str, Any]) -> Path:
    state = tmp_path / "pyxis"
    state.mkdir(mode=0o700)
    (tmp_path / "images.json").write_text(json.dumps({ref: str(root) for ref, root in images.items()}))
    monkeypatch.setenv("PATH", os.pathsep.join([str(STANDIN / "quick"), str(STANDIN / "bin"),
                                                str(Path(sys.executable).parent), os.environ["PATH"]]))
    monkeypatch.setenv("MLREPRO_PYXIS_STANDIN_STATE", str(state))
    monkeypatch.setenv("MLREPRO_PYXIS_STANDIN_IMAGES", str(tmp_path / "images.json"))
    write_config(tmp_path, {"allow_fewer_runs": True, "engine": "enroot", "inference": {"benchmarks": []},
                            "slurm": {"account": "root"}, "telemetry": {"enabled": False}, **config})
    proc = snakemake_slurm(plugin, tmp_path)
    assert proc.returncode == 0, proc.stderr[-8000:]
    return tmp_path / "results"


def check_run(out: Path, system: str, benchmark: str, nodes: int, gpu_nodes: list[str], state: Path, cont: str,
              root: Path, folder: Path, mounts: dict[str, Path]) -> str:
    """What ran for one run, from Slurm's and the stand-in's records and the ranks' own (``cont``: the CONT run.sub
    was given); its log."""
    run_dir = out / "runs" / system / benchmark / "0"
    run = json.loads((run_dir / "run.json").read_text())
    job_id = run["slurm"]["job_id"]
    hosts = hostnames(run["slurm"]["node_list"])
    where = f"{system} (job {job_id} on {hosts})"
    assert len(hosts) == nodes and set(hosts) <= set(gpu_nodes), where
    assert sacct_until([job_id], {"COMPLETED"})[job_id].state == "COMPLETED", where
    alloc = subprocess.run(["sacct", "-X", "-P", "-n", "-j", job_id, "-o", "AllocTRES"], capture_output=True,
                           text=True, check=True).stdout
    assert f"gres/gpu={nodes * GPUS}" in alloc, (where, alloc)
    log = (run_dir / "train.log").read_text()

    # run.sub as a batch script: Slurm's variables for the job (its :::DLPAL line names job, nodes and node list)
    job_line = next((line for line in log.splitlines() if line.startswith(":::DLPAL ")), None)
    if job_line is not None:
        words = job_line.split()
        assert words[1:5] == [cont, job_id, str(nodes), run["slurm"]["node_list"]], (where, job_line)

    # Slurm's steps: one of DGXNGPU tasks per node on the job's nodes with their GPUs (the training)
    recorded = sacct_steps(job_id)
    train = [s for s in recorded if s[2] == nodes * GPUS and "gres/gpu" in s[3]]
    assert train and all(hostnames(s[1]) == hosts and f"gres/gpu={nodes * GPUS}" in s[3] for s in train), \
        (where, recorded)

    # each rank: its own GPU (the local rank-th of the step's), DGXNGPU per node, run.sub's mounts, the image's workdir
    ranks = rank_records(run_dir)
    assert [r["rank"] for r in ranks] == list(range(nodes * GPUS)), (where, ranks)
    for host in hosts:
        mine = [r for r in ranks if r["host"] == host]
        assert sorted(r["gpu"] for r in mine) == [str(i) for i in range(GPUS)], (where, host, mine)
        assert all(r["gpu"] == str(r["local_rank"]) and r["cuda_visible_devices"] == "0,1,2,3"
                   and r["tasks_per_node"] == str(GPUS) and r["ntasks"] == nodes * GPUS for r in mine), mine
        assert all(r["markers"] == {dst: (src / "MARKER").read_text() if (src / "MARKER").is_file() else None
                                    for dst, src in mounts.items()} for r in mine), (where, mine)

    # the stand-in's record: the container made once on each node from CONT (the image root), then used by name
    records = standin_steps(state, job_id)
    made = [r for r in records if r["made"]]
    assert sorted(r["host"] for r in made) == hosts and {(r["image"], r["root"]) for r in made} == \
        {(cont, str(root))}, (where, made)
    trainers = [r for r in records if r["command"][-1] == "./run_and_time.sh"]
    assert len(trainers) == nodes * GPUS, (where, records)
    assert all({(src, dst) for src, dst, _ in r["mounts"]} >= {(str(src), dst) for dst, src in mounts.items()}
               for r in trainers), trainers

    # the page cache cleared on each node (run.sub's srun), cache_clear logged; the official checker's verdict
    assert sorted(line.split()[-1] for line in log.splitlines() if line.startswith("Clearing cache on ")) == hosts, \
        log[-3000:]
    result = (run_dir / "result.txt").read_text().splitlines()
    clears = [json.loads(line.removeprefix(":::MLLOG "))["value"] for line in result if '"key": "cache_clear"' in line]
    assert clears[:nodes] == [True] * nodes, clears
    assert sum('"key": "run_start"' in line for line in result) == 1, result  # rank 0 alone logs the run
    verdict = json.loads((out / "compliance" / system / benchmark / "0.json").read_text())
    assert verdict["valid"], verdict
    return log


def runsub_dir(log: str, folder: Path) -> Path:
    """Where run.sub found its own folder (v4.1: ``export RUNSUB_DIR=$(dirname $(scontrol show job ...))``), from
    its trace (set -x) in the run's log, resolved from the folder it ran in."""
    found = re.findall(r"^\+ export RUNSUB_DIR=(.*)$", log, re.MULTILINE)
    assert len(found) == 1, found
    return (folder / found[0].strip("'")).resolve()


V41 = "NVIDIA/benchmarks/ssd/implementations"


def test_nvidia_v41_runsub_on_a_simulated_gpu_cluster(gpu_nodes: list[str], plugin: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two v4.1 RetinaNet folders (slurm2pytorch, RUNSUB_DIR from `scontrol show job`): one node, and the 8-node
    folder on a system of 2; their registry image imported once per system into a .sqsh, CONT for its runs."""
    systems = {"n1": (f"{V41}/eos_ngc24.09_pytorch", "config_DGXH100_001x08x032.sh", 1),
               "n2": (f"{V41}/eos_n8_ngc24.09_pytorch", "config_DGXH100_008x08x004.sh", 2)}
    published = unpack(DATA / "mlperf_training_nvidia_implementations_v4.1.tar.xz", [f for f, _, _ in
                                                                                       systems.values()], tmp_path)
    data = tmp_path / "openimages"
    params = dataset("ssd", data, {"train_samples": 64, "eval_samples": 16})
    params.update({"max_epochs": 2, "target": 0.0})
    backbone = tmp_path / "torch-home"
    backbone.mkdir()
    (backbone / "MARKER").write_text("backbone\n")
    mounts = {"/datasets/open-images-v6": data, "/root/.cache/torch": backbone}
    cont = "nvcr.io/nvidia/mlperf/mlperf-training:retinanet-24.09-standin"
    root = image(tmp_path / "image_ssd", "/workspace/ssd", "ssd", "/datasets/open-images-v6",
                 [*mounts, "/results"], params, tmp_path / systems["n1"][0])
    port = 20000 + os.getpid() % 10000
    out = run_pipeline(plugin, tmp_path, monkeypatch, {cont: root}, {
        "only": ["ssd"], "ruleset": "4.1.0",
        "systems": {name: {"nodes": nodes, "implementations": {"ssd": str(tmp_path / folder)},
                           "config_files": {"ssd": config},
                           "env": {"DGXNGPU": str(GPUS), "DGXNNODES": str(nodes), "MASTER_PORT": str(port + nodes)}}
                    for name, (folder, config, nodes) in systems.items()},
        "benchmarks": {"ssd": {"runs": 1, "image": cont, "data_dir": str(data),
                               "env": {"BACKBONE_DIR": str(backbone)}}},
    })
    imports = [json.loads(line) for f in sorted((tmp_path / "pyxis").glob("*/imports.jsonl"))
               for line in f.read_text().splitlines()]
    assert len(imports) == len(systems), imports  # the registry image imported once per system, by a job
    for name, (folder, _, nodes) in systems.items():
        # the system's import: `enroot import` of the reference into its .sqsh, recorded by hash; that file is CONT
        sqsh = out / "sqsh" / name / "nvcr.io+nvidia+mlperf+mlperf-training+retinanet-24.09-standin.sqsh"
        record = json.loads(Path(f"{sqsh}.json").read_text())
        assert record["sha256"] == hashlib.sha256(sqsh.read_bytes()).hexdigest() and record["ref"] == cont, record
        ran = [i for i in imports if (tmp_path / i["argv"][i["argv"].index("--output") + 1]).parent == sqsh.parent]
        assert len(ran) == 1 and ran[0]["argv"][-1] == "docker://nvcr.io#nvidia/mlperf/mlperf-training:" \
            "retinanet-24.09-standin" and ran[0]["job"], imports
        log = check_run(out, name, "ssd", nodes, gpu_nodes, tmp_path / "pyxis", str(sqsh), root, tmp_path / folder,
                        {**mounts, "/results": out / "runs" / name / "ssd" / "0"})
        # run.sub found its own folder through Slurm (scontrol show job's Command=), as on a real cluster
        assert runsub_dir(log, tmp_path / folder) == (tmp_path / folder).resolve()
        ranks = rank_records(out / "runs" / name / "ssd" / "0")
        assert all(r["torch_rank"] == str(r["rank"]) and r["world_size"] == str(nodes * GPUS) for r in ranks), ranks
        assert all(r["cwd"] == "/workspace/ssd" for r in ranks), ranks  # run.sub's --container-workdir
    assert not unchanged(tmp_path, published)


def test_nvidia_v11_runsub_on_a_simulated_gpu_cluster(gpu_nodes: list[str], plugin: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The v1.1 ResNet folder (the image's WORKDIR, sudo for the cache, its own srun of run_and_time.sh) on 2
    nodes, planned on this host, which has no GPU; NVML on each node (the replay backend, a trace per host)."""
    assert planning_host_gpus() == 0, "the planning host must have no GPU for this test to mean anything"
    folder = "NVIDIA/benchmarks/resnet/implementations/mxnet"
    published = unpack(DATA / "mlperf_training_nvidia_implementations_v1.1.tar.xz", [folder], tmp_path)
    data = tmp_path / "imagenet"
    params = dataset("resnet", data, {"classes": 2, "image_size": 8, "train_samples": 128, "eval_samples": 32})
    params.update({"width": 4, "blocks": [1, 1, 1, 1], "max_epochs": 2, "target": 0.0})
    cont = "nvcr.io/nvidia/mlperf/mlperf-training:resnet-21.09-standin"
    mounts = {"/data": data}
    root = image(tmp_path / "image_resnet", "/workspace/image_classification", "resnet", "/data",
                 [*mounts, "/results"], params, tmp_path / folder)
    # each host's NVML: 4 replayed GPUs of its own
    trace = {"hosts": {h: {"devices": [constant_gpu(f"GPU-{h}-{i}", 100.0 + i, seconds=60) for i in range(GPUS)]}
                       for h in gpu_nodes}}
    (tmp_path / "trace.json").write_text(json.dumps(trace))
    out = run_pipeline(plugin, tmp_path, monkeypatch, {cont: root}, {
        "only": ["resnet"], "ruleset": "1.1.0",
        "telemetry": {"enabled": True, "hz": 1, "backend": f"replay:{tmp_path / 'trace.json'}"},
        "systems": {"n2": {"nodes": 2, "implementations": {"resnet": str(tmp_path / folder)},
                           "config_files": {"resnet": "config_DGXA100_multi_8x8x51.sh"},
                           "env": {"DGXNGPU": str(GPUS), "DGXNNODES": "2"}}},
        "benchmarks": {"resnet": {"runs": 1, "image": cont, "data_dir": str(data)}},
    })
    sqsh = out / "sqsh" / "n2" / "nvcr.io+nvidia+mlperf+mlperf-training+resnet-21.09-standin.sqsh"  # CONT
    check_run(out, "n2", "resnet", 2, gpu_nodes, tmp_path / "pyxis", str(sqsh), root, tmp_path / folder,
              {**mounts, "/results": out / "runs" / "n2" / "resnet" / "0"})
    ranks = rank_records(out / "runs" / "n2" / "resnet" / "0")
    assert all(r["cwd"] == "/workspace/image_classification" for r in ranks), ranks  # the image's WORKDIR
    # the allocation's GPUs, from Slurm (the planning host's count, 0, reached no run); NVML of each node: its own 4
    run = json.loads((out / "runs" / "n2" / "resnet" / "0" / "run.json").read_text())
    hosts = hostnames(run["slurm"]["node_list"])
    assert run["gpus"] == list(range(GPUS)), run["gpus"]
    tel = run["telemetry"]
    assert [h["host"] for h in tel["hosts"]] == hosts and all(h["gpus"] == GPUS for h in tel["hosts"]), tel["hosts"]
    assert sorted(g["uuid"] for g in tel["gpus"]) == sorted(f"GPU-{h}-{i}" for h in hosts for i in range(GPUS))
    assert not unchanged(tmp_path, published)
