"""A folder with run.sub (issue 33): planned on a host without GPUs, its runs ask Slurm for the nodes' GPUs and run
run.sub there; the variables it needs are named when its config file is captured, and at planning once it is; GPUs
outside Slurm are locked per host."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from mlrepro import config as mlconfig
from mlrepro import systems as mlsystems
from mlrepro.planning.plan import Plan
from mlrepro.runs import accelerators, runsub
from mlrepro.runs.capture import CaptureError
from tests.conftest import REPO, captured, launch_preview

RUN_SUB = """#!/bin/bash
#SBATCH --job-name vendor
#SBATCH --exclusive
#SBATCH --mem=0
set -euxo pipefail
: "${CONT:?CONT not set}"
: "${DGXSYSTEM:?DGXSYSTEM not set}"
: "${NEXP:=5}"
: "${CLEAR_CACHES:=1}"
_cont_mounts="${DATADIR}:/data,${EXTRADIR}:/extra,${LOGDIR}:/results"
if [ "${API_LOGGING:-0}" -eq 1 ]; then _cont_mounts="${_cont_mounts},${API_LOG_DIR}:/logs"; fi
srun --ntasks="${SLURM_JOB_NUM_NODES}" --container-image="${CONT}" --container-name=vendor true
for _experiment_index in $(seq 1 "${NEXP}"); do
  if [ "${CLEAR_CACHES}" -eq 1 ]; then
    srun --ntasks="${SLURM_JOB_NUM_NODES}" bash -c "sync && sudo /sbin/sysctl vm.drop_caches=3"
    srun --ntasks="${SLURM_JOB_NUM_NODES}" --container-name=vendor python3 -c "print('CACHE_CLEAR logged')"
  fi
  srun --mpi=pmix --ntasks="$(( SLURM_JOB_NUM_NODES * DGXNGPU ))" --ntasks-per-node="${DGXNGPU}" \\
    --container-name=vendor --container-mounts="${_cont_mounts}" --container-workdir=/workspace ./run_and_time.sh
done
"""


def _folder(base: Path) -> Path:
    folder = base / "vendor"
    folder.mkdir()
    (folder / "run.sub").write_text(RUN_SUB)
    (folder / "run_and_time.sh").write_text("#!/bin/bash\necho run\n")
    for nodes in (1, 2):
        (folder / f"config_SIM_{nodes}x4.sh").write_text(
            f"export DGXNNODES={nodes}\nexport DGXNGPU=4\nexport WALLTIME=00:20:00\n"
            "export DGXSYSTEM=$(basename ${BASH_SOURCE[0]} .sh | sed s/^config_//)\n")
    (base / "data").mkdir()
    return folder


def _config(base: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    return {"outdir": str(base / "out"), "ruleset": "2.0.0", "engine": "enroot", "allow_fewer_runs": True,
            "systems": {"sim_n1": {"benchmarks": ["resnet"], "config_files": {"resnet": "config_SIM_1x4.sh"}},
                        "sim_n2": {"nodes": 2, "benchmarks": ["resnet"],
                                   "config_files": {"resnet": "config_SIM_2x4.sh"}, "env": {"EXTRADIR": "/n2"}}},
            "benchmarks": {"resnet": {"implementation": "vendor", "image": "registry.example/vendor:1",
                                      "data_dir": "data", "runs": 2, "env": env or {}},
                           # an embedded mini of a benchmark the systems do not run: not planned
                           "bert": {}}}


def _uncaptured(raw: dict[str, Any], base: Path) -> Plan:
    full, benchmarks = mlconfig.load(raw, "test", base_dir=base)
    systems, units = mlsystems.load(full, benchmarks, base, "test")
    return Plan(full, benchmarks, {}, systems, units, REPO)


def _plan(raw: dict[str, Any], base: Path) -> Plan:
    """The plan of ``raw``, each config file captured as its job does it."""
    return captured(_uncaptured(raw, base))


def test_a_variable_run_sub_needs_stops_its_capture_naming_it_the_line_and_the_mount(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    line = RUN_SUB.splitlines().index(next(x for x in RUN_SUB.splitlines() if x.startswith("_cont_mounts="))) + 1
    with pytest.raises(CaptureError) as e:  # the capture job of sim_n1's config file runs run.sub: EXTRADIR unset
        _plan(_config(tmp_path), tmp_path)
    # sim_n2 sets it in systems.sim_n2.env; sim_n1 does not; API_LOG_DIR (an optional mount's) is never demanded
    assert f"benchmarks.resnet.env.EXTRADIR: {folder / 'run.sub'}:{line} reads ${{EXTRADIR}} unset" in str(e.value)
    assert "the source of the container mount /extra" in str(e.value) and "API_LOG_DIR" not in str(e.value)
    assert "systems.sim_n1.env.EXTRADIR" in str(e.value) and "systems.sim_n2" not in str(e.value)
    # once captured (the variable set), planning runs nothing of the folder: the preview names it where the config
    # no longer sets it
    _plan(_config(tmp_path, {"EXTRADIR": "/x"}), tmp_path)
    plan = _uncaptured(_config(tmp_path), tmp_path)
    assert plan.captures.problems() == []
    launch_preview(plan, tmp_path / "p.json")
    entry = json.loads((tmp_path / "p.json").read_text())[0]
    assert entry["unset_variables"] == ["EXTRADIR"] and entry["demands"][0]["mounts"] == ["/extra"]
    assert f"{folder / 'run.sub'}:{line}" in entry["error"]


def test_planned_on_a_host_without_gpus_the_runs_ask_for_the_nodes_gpus(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _folder(tmp_path)
    monkeypatch.setattr(accelerators, "machine_gpus", lambda: 0)  # the login node
    import mlrepro.planning.launches as launches_module
    monkeypatch.setattr(launches_module, "machine_gpus", lambda: 0)
    plan = _plan(_config(tmp_path, {"EXTRADIR": "/extra/data"}), tmp_path)
    assert plan.ordered_units == [("sim_n1", "resnet"), ("sim_n2", "resnet")]  # bert (a mini) is not planned
    assert plan.local_gpus == 0
    resources = plan.run_resources()
    w = type("W", (), {"system": "sim_n2", "benchmark": "resnet"})()
    value = {k: (v(w) if callable(v) else v) for k, v in resources.items()}
    assert value["gres"] == "gpu:4" and value["nodes"] == 2 and value["mpi"] == "srun"
    # no --mem at all (the executor plugin refuses one in slurm_extra and passes none for mem_mb 0)
    assert value["slurm_extra"].split() == ["--exclusive"] and value["mem_mb"] == 0
    assert value["runtime"] == 20 and value["cpus_per_task"] == -1 and value["tasks_per_gpu"] == 0
    launch = plan.launches.spec("sim_n2", "resnet")
    # the registry image: imported once per system into a .sqsh, which is CONT (mlrepro/containers/sqsh.py)
    assert launch.gpus == 8 and launch.container == str(tmp_path / "out" / "sqsh" / "sim_n2" /
                                                        "registry.example+vendor+1.sqsh")
    assert launch.runsub_env == {"DGXSYSTEM": "SIM_2x4", "EXTRADIR": "/n2"}  # the system's value wins
    assert plan.images == []  # a ready image: nothing is built
    env = runsub.environment(launch, 7, "/logs", launch.container or "")
    assert (env["CONT"], env["NEXP"], env["SEED"], env["LOGDIR"], env["EXTRADIR"]) == (
        launch.container, "1", "7", "/logs", "/n2")
    out = tmp_path / "out" / "launch_preview.json"
    table = launch_preview(plan, out)
    entries = json.loads(out.read_text())
    n2 = entries[1]
    assert n2["node_hours"] == pytest.approx(2 * 2 * 20 / 60, abs=1e-3) and n2["allocation"]["gpus_per_node"] == 4
    training = n2["steps"][-1]
    assert training[:5] == ["srun", "--mpi=pmix", "--ntasks=8", "--ntasks-per-node=4", "--container-name=vendor"]
    assert training[5] == (f"--container-mounts={tmp_path / 'data'}:/data,/n2:/extra,"
                           f"{plan.out.run_dir('sim_n2', 'resnet', 0).resolve()}:/results")
    assert n2["summary"]["cache_clear"] and n2["summary"]["cache_clear_logged"] and "unset_variables" not in n2
    assert "node-hours" in table


def test_allocated_gpus_are_the_jobs_gres_on_this_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # scontrol show job -d as Slurm 22.05 prints it for a 2-node job of gres gpu:4
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\nif [ \"$2\" = hostnames ]; then echo mlnode1; echo mlnode2; exit 0; fi\n"
        "echo 'JobId=5 JobName=x'\necho '   Nodes=mlnode[1-2] CPU_IDs=0-3 Mem=0 GRES=gpu:4(IDX:0-3)'\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert accelerators.allocated_gpus({"SLURM_JOB_ID": "5"}, host="mlnode2") == [0, 1, 2, 3]
    assert accelerators.allocated_gpus({"SLURM_JOB_ID": "5", "CUDA_VISIBLE_DEVICES": "2,3"}, host="other") == [2, 3]


def test_gpu_locks_are_per_host_and_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = accelerators.lock_dir(None)
    assert folder == tmp_path / "mlrepro" / "gpu-locks" and stat.S_IMODE(folder.stat().st_mode) == 0o700
    # two pipelines (two output folders) on one host share the folder: their runs get disjoint GPUs
    with accelerators.claim(folder, 4, 2) as first, accelerators.claim(folder, 4, 2) as second:
        assert sorted(first + second) == [0, 1, 2, 3]
        with pytest.raises(accelerators.GpuError, match="no 1 free GPUs"), \
                accelerators.claim(folder, 4, 1, timeout_s=0.3):
            pass
    folder.chmod(0o755)
    with pytest.raises(accelerators.GpuError, match="mode 0700"):
        accelerators.lock_dir(None)
    open_to_all = tmp_path / "shared"
    open_to_all.mkdir(mode=0o777)
    open_to_all.chmod(0o777)
    with pytest.raises(accelerators.GpuError, match="root-owned sticky"):
        accelerators.lock_dir(str(open_to_all))


def test_minis_a_ruleset_lacks_are_left_out_where_the_systems_name_what_runs(tmp_path: Path) -> None:
    _folder(tmp_path)
    raw = {"outdir": str(tmp_path / "out"), "ruleset": "4.1.0", "engine": "enroot", "allow_fewer_runs": True,
           "benchmarks": {"ssd": {"implementation": "vendor", "image": "registry.example/retinanet:1",
                                  "data_dir": "data", "runs": 1, "env": {"EXTRADIR": "/x"}},
                          "minigo": {}},  # the embedded default's; 4.1.0 has no minigo
           "systems": {"sim_n1": {"benchmarks": ["ssd"], "config_files": {"ssd": "config_SIM_1x4.sh"}}}}
    assert _plan(raw, tmp_path).ordered_units == [("sim_n1", "ssd")]
    del raw["systems"]["sim_n1"]["benchmarks"]
    with pytest.raises(mlconfig.ConfigError, match=r"benchmarks.minigo: ruleset training 4.1.0 has no benchmark "
                                                  r"'minigo' .*leave it out with only: \[\.\.\.\]"):
        _plan(raw, tmp_path)


def test_an_image_is_built_for_its_systems_platform(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "Dockerfile").write_text("ARG FROM_IMAGE_NAME=nvcr.io/nvidia/pytorch:24.09-py3\n"
                                       "FROM ${FROM_IMAGE_NAME}\n")
    raw = _config(tmp_path, {"EXTRADIR": "/x"})
    del raw["benchmarks"]["resnet"]["image"]  # built from the folder's Dockerfile
    raw["systems"]["sim_n1"]["platform"] = raw["systems"]["sim_n2"]["platform"] = "linux/arm64"
    plan = _plan(raw, tmp_path)
    assert plan.images == ["resnet-vendor"] and plan.image_platform("resnet-vendor") == "linux/arm64"
    spec = plan.environment_spec  # the system description: a vendor's framework, no mini note
    assert spec["mini"] is False
    assert spec["frameworks"] == {"resnet": "pytorch 24.09-py3 (nvcr.io/nvidia/pytorch:24.09-py3)"}
    del raw["systems"]["sim_n2"]["platform"]
    with pytest.raises(mlconfig.ConfigError, match="image resnet-vendor runs on systems of platforms default, "
                                                  "linux/arm64"):
        _plan(raw, tmp_path)


def test_the_simulated_clusters_vendor_folder_previews_its_steps(tmp_path: Path) -> None:
    """tests/fixtures/vendor_gpu (the simulated GPU cluster's folder, NVIDIA's form): what its runs will execute."""
    folder = REPO / "tests" / "fixtures" / "vendor_gpu"
    if not (folder / "run.sub").is_file():
        pytest.skip("tests/fixtures/vendor_gpu is not in this checkout")
    (tmp_path / "data").mkdir()
    raw = {"outdir": str(tmp_path / "out"), "ruleset": "2.0.0", "engine": "enroot", "allow_fewer_runs": True,
           "systems": {"simgpu_n2": {"nodes": 2, "benchmarks": ["resnet"],
                                     "config_files": {"resnet": "config_SIMGPU_2x4.sh"}}},
           "benchmarks": {"resnet": {"implementation": str(folder), "image": "sim:latest", "data_dir": "data",
                                     "runs": 1, "env": {"EXTRADIR": str(tmp_path / "data")}}}}
    plan = _plan(raw, tmp_path)
    launch_preview(plan, tmp_path / "p.json")
    (entry,) = json.loads((tmp_path / "p.json").read_text())
    assert "error" not in entry, entry.get("error")
    training = entry["summary"]["training"]
    assert (training["ntasks"], training["ntasks_per_node"], training["mpi"]) == ("8", "4", "pmix")
    assert training["mounts"] == ["/data", "/extra", "/results"] and entry["summary"]["cache_clear_logged"]
    assert entry["node_hours"] == pytest.approx(2 * 10 / 60, abs=1e-3)


def test_data_steps_have_their_own_slurm_resources(tmp_path: Path) -> None:
    raw = {"outdir": str(tmp_path / "out"), "only": ["resnet"], "allow_fewer_runs": True,
           "benchmarks": {"resnet": {"runs": 1}},
           "slurm": {"data_steps": {"prepare": {"runtime": 600, "mem_mb": 256000, "cpus_per_task": 32}}}}
    plan = _plan(raw, tmp_path)
    assert plan.data_resources("prepare") == {"runtime": 600, "mem_mb": 256000, "cpus_per_task": 32}
    assert plan.data_resources("download") == {}
    raw["slurm"]["data_steps"]["train"] = {"runtime": 1}
    with pytest.raises(mlconfig.ConfigError, match="data_steps"):
        _plan(raw, tmp_path)


# A one-node allocation as this machine can give it without Slurm: srun runs its command here once (the options,
# pyxis' included, are dropped) and records its arguments; scontrol answers as Slurm 22.05 does.
FAKE_SRUN = """#!/bin/bash
printf '%s\\n' "$*" >> "$FAKE_SLURM_LOG"
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
[ $# -gt 0 ] && exec "$@"
"""
FAKE_SCONTROL = """#!/bin/sh
case "$1 $2" in
  "show hostnames") echo "$(hostname)" ;;
  "show job") echo "JobId=$4$3 NumNodes=1 NodeList=$(hostname) Partition=sim"
              echo "   Nodes=$(hostname) CPU_IDs=0-3 Mem=0 GRES=gpu:4(IDX:0-3)" ;;
esac
"""


def test_the_driver_runs_one_experiment_of_run_sub_in_the_allocation(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from mlrepro.runs import driver
    from tests.conftest import write_mllog

    folder = _folder(tmp_path)
    write_mllog(folder / "log.txt", "resnet", 1_700_000_000_000, 1.0)
    (folder / "run_and_time.sh").write_text('#!/bin/bash\necho "rank of $DGXNGPU, seed $SEED"\ncat log.txt\n')
    (folder / "run_and_time.sh").chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL), ("sudo", "#!/bin/sh\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "77")  # the jobstep plugin leaves only the job id
    monkeypatch.setenv("FAKE_SLURM_LOG", str(tmp_path / "srun.log"))
    for var in ("SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_NODELIST"):
        monkeypatch.delenv(var, raising=False)
    plan = _plan(_config(tmp_path, {"EXTRADIR": "/extra/data"}), tmp_path)
    launch = plan.launches.spec("sim_n1", "resnet")
    path = tmp_path / "launch.json"
    launch.write(path)
    run_dir = tmp_path / "run0"
    driver.main(["--launch", str(path), "--seed", "5", "--run-dir", str(run_dir), "--telemetry-hz", "0"])
    record = json.loads((run_dir / "run.json").read_text())
    assert record["launcher"] == "run.sub" and record["gpus"] == [0, 1, 2, 3]
    assert record["allocation"]["nodes"] == 1 and record["node"]["sockets"] >= 1
    log = (run_dir / "train.log").read_text()
    assert log.count("rank of 4, seed 5") == 1  # NEXP=1 (run.sub's own default is 5), the run's seed
    steps = (tmp_path / "srun.log").read_text().splitlines()
    sqsh = tmp_path / "out" / "sqsh" / "sim_n1" / "registry.example+vendor+1.sqsh"  # the system's import: CONT
    assert steps[0] == f"--ntasks=1 --container-image={sqsh} --container-name=vendor true"
    assert steps[-1] == (f"--mpi=pmix --ntasks=4 --ntasks-per-node=4 --container-name=vendor --container-mounts="
                         f"{tmp_path / 'data'}:/data,/extra/data:/extra,{run_dir}:/results "
                         "--container-workdir=/workspace ./run_and_time.sh")
    assert (run_dir / "result.txt").read_text().count(":::MLLOG") == 18


def test_a_variable_run_sub_reads_unset_outside_any_mount_is_named_by_the_capture_and_the_preview(
        tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    text = (folder / "run.sub").read_text()
    (folder / "run.sub").write_text(text.replace('for _experiment_index', 'echo ":::DLPAL ${MLPERF_CLUSTER_NAME}"\n'
                                                                        'for _experiment_index', 1))
    line = (folder / "run.sub").read_text().splitlines().index('echo ":::DLPAL ${MLPERF_CLUSTER_NAME}"') + 1
    with pytest.raises(CaptureError, match=rf"run.sub:{line} reads \$\{{MLPERF_CLUSTER_NAME\}} unset .*no mount"):
        _plan(_config(tmp_path, {"EXTRADIR": "/x"}), tmp_path)
    _plan(_config(tmp_path, {"EXTRADIR": "/x", "MLPERF_CLUSTER_NAME": "c"}), tmp_path)
    plan = _uncaptured(_config(tmp_path, {"EXTRADIR": "/x"}), tmp_path)  # captured: the config no longer sets it
    table = launch_preview(plan, tmp_path / "p.json")
    entry = json.loads((tmp_path / "p.json").read_text())[0]
    assert entry["unset_variables"] == ["MLPERF_CLUSTER_NAME"] and "unbound variable" in entry["error"]
    assert entry["demands"][0]["mounts"] == [] and entry["demands"][0]["line"] == line
    assert "run.sub fails" in table


def test_a_vendor_systems_description_names_its_frameworks_and_no_mini_note() -> None:
    from mlrepro.core import probe
    from mlrepro.environment import system_desc

    desc = system_desc.describe("org", "closed", "onprem", "dgx", 1, "cuda", mini=False,
                                frameworks={"ssd": "pytorch 24.09-py3 (nvcr.io/nvidia/pytorch:24.09-py3)"})
    assert desc["framework"] == "ssd: pytorch 24.09-py3 (nvcr.io/nvidia/pytorch:24.09-py3)"
    assert desc["sw_notes"] == "" and int(desc["host_processors_per_node"]) == probe.sockets() >= 1
    assert "mini workloads" in system_desc.describe("org", "open", "research", "cpu", 1, "cpu")["sw_notes"]


@pytest.mark.parametrize(("ruleset", "benchmark"), [("1.1.0", "minigo"), ("2.0.0", "ssd"), ("3.0.0", "rnnt"),
                                                    ("4.1.0", "gnn"), ("5.0.0", "retinanet"), ("6.0.0", "llama31_8b")])
def test_every_round_plans_a_vendor_folder_of_its_own(tmp_path: Path, ruleset: str, benchmark: str) -> None:
    _folder(tmp_path)
    raw = {"outdir": str(tmp_path / "out"), "ruleset": ruleset, "engine": "enroot", "allow_fewer_runs": True,
           "benchmarks": {benchmark: {"implementation": "vendor", "image": "registry.example/x:1", "data_dir": "data",
                                      "runs": 1, "env": {"EXTRADIR": "/x"}}},
           "systems": {"sim_n1": {"config_files": {benchmark: "config_SIM_1x4.sh"}}}}
    plan = _plan(raw, tmp_path)
    assert plan.ordered_units == [("sim_n1", benchmark)] and plan.launches.spec("sim_n1", benchmark).run_sub


def test_planning_runs_nothing_of_the_folder_its_capture_job_does(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    marker = tmp_path / "run-sub-ran"
    # a redirection that bash itself makes (the one write the sandbox cannot keep inside): it shows run.sub ran
    (folder / "run.sub").write_text(RUN_SUB.replace("set -euxo pipefail\n", f"set -euxo pipefail\necho >> {marker}\n"))
    plan = _uncaptured(_config(tmp_path, {"EXTRADIR": "/x"}), tmp_path)
    assert plan.captures.problems() == [] and plan.capture_runs(plan.captures.keys[("sim_n1", "resnet")])
    assert not marker.exists()  # planning: the capture keys, problems and the jobs' params
    captured(plan)
    assert marker.exists()  # the capture jobs
