"""Job shapes as Slurm resources, the multi-process launcher, and a 2-process run under torchrun (no Slurm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mlrepro.engines import Mount
from mlrepro.slurm import launch
from mlrepro.slurm.resources import JobShape, ShapeError, shape_from_config_sh, slurm_resources, walltime_minutes
from mlrepro.training import distributed
from tests.conftest import REPO, mini_launch


def test_shape_from_nvidia_config_sh() -> None:
    shape = shape_from_config_sh({"DGXNNODES": "8", "DGXNGPU": "8", "WALLTIME": "40"})
    assert shape == JobShape(nodes=8, tasks_per_node=8, gpus_per_node=8, walltime="00:40:00")
    assert shape_from_config_sh({"DGXNNODES": "1", "DGXNGPU": "8", "WALLTIME": "01:30:00"}).minutes == 90
    assert walltime_minutes("1-00:00") == 1440 and walltime_minutes("00:00:30") == 1
    with pytest.raises(ShapeError, match="walltime '90 minutes'"):
        shape_from_config_sh({"WALLTIME": "90 minutes"})


def test_resources_of_a_shape() -> None:
    config = {"slurm": {"partition": "gpu", "account": "mlperf", "qos": None, "constraint": "a100",
                        "exclusive": True, "mem_mb": 1000}}
    res = slurm_resources(JobShape(nodes=2, tasks_per_node=8, gpus_per_node=8, walltime="00:40:00"), config, 4)
    assert res == {"nodes": 2, "tasks": 16, "cpus_per_task": 4, "mem_mb": 1000, "runtime": 40,
                   "slurm_partition": "gpu", "slurm_account": "mlperf", "constraint": "a100",
                   "slurm_extra": "--exclusive", "mpi": "srun", "gres": "gpu:8", "tasks_per_gpu": 1}
    single = slurm_resources(JobShape(), {"slurm": {"exclusive": False}}, 1)
    assert single == {"nodes": 1, "tasks": 1, "cpus_per_task": 1, "mem_mb": 4000, "runtime": 30}


def test_launcher_command_lines() -> None:
    argv = ["python", "-m", "mlrepro.train", "--seed", "1"]
    assert launch.command(argv, "/py", 1, 1, 1, {}) == launch.Launch(["/py", "-m", "mlrepro.train", "--seed", "1"])
    torchrun = launch.command(argv, "/py", 1, 2, 1, {})
    assert torchrun.argv[:4] == ["/py", "-P", "-m", "torch.distributed.run"] and "--nproc-per-node=2" in torchrun.argv
    assert torchrun.argv[-4:] == ["-m", "mlrepro.train", "--seed", "1"] and torchrun.env == {} and not torchrun.setup
    with pytest.raises(launch.LaunchError, match="a run on 2 nodes needs a Slurm allocation"):
        launch.command(argv, "/py", 2, 1, 1, {})
    container = launch.Container("apptainer", "/i.sif", "n", [], gpus=False)
    with pytest.raises(launch.LaunchError, match="a run of 2 processes in a container needs a Slurm allocation"):
        launch.command(argv, "/py", 1, 2, 1, {}, container)


def test_srun_lines_in_an_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside an allocation: one srun of all ranks on every node; rendezvous at the node list's first host (what
    `scontrol show hostnames` says, asked with the node list from the controller where the environment has none);
    caches cleared first by one task per node; containers in run.sub's forms; other engines refused."""
    calls: list[list[str]] = []

    def run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        out = {"show": "JobId=42 NodeList=gpu[07-08] NumNodes=2\n", "hostnames": "gpu07\ngpu08\n",
               "--help": "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\n"}
        return subprocess.CompletedProcess(cmd, 0, out["show" if cmd[2] == "job" else cmd[2]] if cmd[0] == "scontrol"
                                           else out[cmd[1]], "")

    monkeypatch.setattr(launch.subprocess, "run", run)
    monkeypatch.setattr("mlrepro.slurm.jobs.subprocess.run", run)
    monkeypatch.setattr(launch.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr("mlrepro.slurm.containers.subprocess.run", run)
    env = {"SLURM_JOB_ID": "42"}
    argv = ["python", "-m", "mlrepro.train"]
    ranks = ["srun", "--jobid=42", "--nodes=2", "--ntasks=8", "--ntasks-per-node=4", "--cpus-per-task=3",
             "--kill-on-bad-exit=1", "--export=ALL"]
    per_node = ["srun", "--jobid=42", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                "--export=ALL"]
    native = launch.command(argv, "/py", 2, 4, 3, env, drop_caches=True)
    assert native.argv == [*ranks, "/py", "-m", "mlrepro.train"]
    assert native.env["MASTER_ADDR"] == "gpu07" and int(native.env["MASTER_PORT"]) > 0
    assert ["scontrol", "show", "hostnames", "gpu[07-08]"] in calls
    assert native.setup == [[*per_node, "sh", "-c", launch.DROP_CACHES]]
    assert launch.command(argv, "/py", 2, 4, 3, env).setup == []  # drop_caches off

    mounts = [Mount(Path("/data/dlrm"), target="/data"), Mount(Path("/runs/0"), read_only=False, target="/results")]
    pyxis = launch.command(["bash", "run_and_time.sh"], "/py", 2, 4, 3, env,
                           launch.Container("enroot", "/images/x.sqsh", "mlrepro_dlrm_0", mounts, gpus=True))
    assert pyxis.setup == [[*per_node, "--container-image=/images/x.sqsh", "--container-name=mlrepro_dlrm_0", "true"]]
    assert pyxis.argv == [*ranks, "--container-name=mlrepro_dlrm_0",
                          "--container-mounts=/data/dlrm:/data:ro,/runs/0:/results", "--no-container-mount-home",
                          "bash", "run_and_time.sh"]
    apptainer = launch.command(["bash", "run_and_time.sh"], "/py", 2, 4, 3, env,
                               launch.Container("apptainer", "/images/x.sif", "n", mounts, gpus=True, workdir="/w"))
    assert apptainer.argv == [*ranks, "apptainer", "exec", "--nv", "--no-home", "--bind", "/data/dlrm:/data:ro",
                              "--bind", "/runs/0:/results", "--pwd", "/w", "/images/x.sif", "bash", "run_and_time.sh"]
    assert apptainer.setup == [] and apptainer.env["MASTER_ADDR"] == "gpu07"
    with pytest.raises(launch.LaunchError, match="engine podman runs one process per run"):
        launch.command(argv, "/py", 2, 1, 1, env, launch.Container("podman", "img", "n", [], gpus=False))


def test_failed_tasks_name_their_node() -> None:
    log = ("rank 1 fails\nsrun: error: mlnode2: task 1: Exited with exit code 3\n"
           "srun: launch/slurm: _step_signal: Terminating StepId=11.1\n"
           "srun: error: gpu[07]: tasks 0-3,5: Killed\n")
    assert launch.failed_tasks(log) == ["task 1 on mlnode2: Exited with exit code 3", "task 0-3,5 on gpu[07]: Killed"]
    assert launch.failed_tasks("Traceback ...\n") == []


def test_rank_from_launcher_variables() -> None:
    assert distributed.context_from_env({}) == distributed.Context()
    slurm = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1"}
    assert distributed.context_from_env(slurm) == distributed.Context(3, 4, 1, 1)
    torchrun = {**slurm, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    assert distributed.context_from_env(torchrun) == distributed.Context(0, 2, 0, 0)


@pytest.mark.integration
def test_two_processes_under_torchrun_match_one(tmp_path: Path) -> None:
    """Without Slurm: torchrun starts 2 ranks; one MLPerf log, from rank 0; the metric of 1 process."""
    params = yaml.safe_load((REPO / "minis" / "dlrm" / "defaults.yaml").read_text())
    params.update(max_epochs=1, data={**params["data"], "train_samples": 1024, "eval_samples": 256})
    py = [sys.executable, "-m"]
    subprocess.run([*py, "mlrepro.datasets.generated", "--benchmark", "dlrm", "--out", str(tmp_path / "data"),
                    "--params", json.dumps(params), "--seed", "3"], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    results = {}
    for n in (1, 2):
        subprocess.run([*py[:1], *mini_launch("dlrm", params, tmp_path / "data", tmp_path, tasks_per_node=n),
                        "--seed", "11", "--run-dir", str(tmp_path / f"run{n}")], check=True, env=env, timeout=300)
        results[n] = json.loads((tmp_path / f"run{n}" / "run.json").read_text())
    assert results[2]["processes"] == 2 and results[2]["slurm"] is None
    assert results[1]["epochs"] == results[2]["epochs"]
    assert abs(results[1]["final_metric"] - results[2]["final_metric"]) < 1e-5
    log = (tmp_path / "run2" / "result.txt").read_text()
    assert log.count('"key": "run_start"') == 1  # rank 0 alone logs
    assert log.count('"key": "seed"') == 1
    names = {p.name for p in (tmp_path / "run2").iterdir()}
    assert {"result.txt", "run.json", "train.log", "ledger.jsonl"} <= names
    assert not [n for n in names if n.startswith(".")], names  # nothing half-written left
