"""What a vendor folder needs, found from its run (issue 42 items 1, 2, 4; issue 43's preview sandbox): synthetic
run.sub files in NVIDIA's form, one per class of what later rounds' folders do, each run by the pipeline's tracer
(mlrepro/slurm/trace.py) and demand finder (mlrepro/runs/demands.py) as the capture job and the preview run them."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from mlrepro.runs import demands
from mlrepro.slurm import trace

HEAD = """#!/bin/bash
#SBATCH --exclusive
set -euxo pipefail
: "${CONT:?CONT not set}"
: "${NEXP:=5}"
"""
TRAIN = """srun --mpi=pmix --ntasks="$(( SLURM_JOB_NUM_NODES * DGXNGPU ))" --ntasks-per-node="${DGXNGPU}" \\
  --container-image="${CONT}" --container-mounts="${_cont_mounts}" --container-workdir=/workspace \\
  slurm2pytorch ./run_and_time.sh
"""
ENV = {"CONT": "nvcr.io/nvidia/x:24.09", "DATADIR": "/lustre/data", "LOGDIR": "/lustre/out/runs/0", "NEXP": "1",
       "DGXNGPU": "8", "DGXNNODES": "2", "DGXSYSTEM": "DGXB200_2x8"}
NODE = trace.Node.of(2, 8, "DGXB200_2x8")


def folder(tmp_path: Path, run_sub: str, **files: str) -> Path:
    where = tmp_path / "impl"
    where.mkdir(parents=True)
    (where / "run.sub").write_text(run_sub)
    (where / "run_and_time.sh").write_text("#!/bin/bash\n")
    for name, text in files.items():
        (where / name.replace("__", ".")).write_text(text)
    return where


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def find(where: Path, env: dict[str, str] | None = None, node: trace.Node = NODE) -> demands.Finding:
    return demands.find(where / "run.sub", {**ENV, **(env or {})}, node)


def test_optional_blocks_defaults_and_other_languages_programs_are_never_demanded(tmp_path: Path) -> None:
    run_sub = HEAD + """: "${API_LOGGING:=0}"
_cont_mounts="${DATADIR}:/data,${LOGDIR}:/results"
if [[ -n "${APILOG_PRECISION:-}" ]]; then
  _cont_mounts="${_cont_mounts},${API_LOG_DIR}:/logs"
  JSON_FMT='{model_name: $mn, configs: {($dt): [$bs]}}'
  jq -n --arg mn bert --arg dt "$APILOG_PRECISION" --arg bs "$BATCHSIZE" "$JSON_FMT" > /dev/null
fi
if [ "${API_LOGGING}" -eq 1 ]; then echo "${README_PREFIX}/x"; fi
if [ "${JET:-0}" -eq 1 ]; then _cont_mounts="${_cont_mounts},${JET_DIR}:/root/.jet"; fi
# a program of another language on the path taken: its $x are its own
echo '{"a": 1}' | awk '{ print $bs, $dt }' > /dev/null
python3 -c 'import sys; x = "$MODEL_NAME"; print(x)' > /dev/null
echo "extra: ${EXTRA_MOUNTS:-}"
""" + TRAIN
    found = find(folder(tmp_path, run_sub))
    assert found.demands == [], [d.describe() for d in found.demands]
    assert "training" in trace.summarize(found.trace)
    # the same read on the path taken is demanded: the branch is taken once its condition holds
    found = find(folder(tmp_path / "taken", run_sub), {"APILOG_PRECISION": "fp8", "BATCHSIZE": "8"})
    assert [(d.variable, d.line, d.mounts) for d in found.demands] == [
        ("API_LOG_DIR", line_of(run_sub, "API_LOG_DIR}:/logs"), ["/logs"])]


def test_a_checkpoint_variable_of_a_mount_is_demanded_with_its_line_and_destination(tmp_path: Path) -> None:
    run_sub = HEAD + """_cont_mounts="${DATADIR}:/data:ro,${MODEL}:/ckpt:ro,${LOGDIR}:/results:rw"
""" + TRAIN
    where = folder(tmp_path, run_sub)
    found = find(where)
    (demand,) = found.demands
    assert (demand.variable, demand.file, demand.line, demand.reason, demand.mounts) == (
        "MODEL", str(where / "run.sub"), line_of(run_sub, "${MODEL}:/ckpt"), "unset", ["/ckpt"])
    text = demands.problems(found.demands, benchmark="llama2_70b_lora", system="b200", config_name="config_X.sh",
                            fills={"/data": "gov_report", "/ckpt": "model"})[0]
    assert text.startswith("  benchmarks.llama2_70b_lora.env.MODEL: ")
    assert "the container mount /ckpt" in text and "systems.b200.env.MODEL" in text and "model/" in text
    # set to "" by a config (no set -u needed): an empty mount source, the same line named
    no_u = run_sub.replace("set -euxo pipefail", "set -ex")
    for env in ({"MODEL": ""}, {}):
        (d,) = find(folder(tmp_path / f"empty{len(env)}", no_u), env).demands
        assert (d.variable, d.line, d.reason, d.mounts) == ("MODEL", line_of(no_u, "${MODEL}:/ckpt"), "empty",
                                                            ["/ckpt"])
    assert find(where, {"MODEL": "/lustre/llama2-70b"}).demands == []


def test_run_sub_finds_its_folder_through_scontrol_and_sources_its_mounts_there(tmp_path: Path) -> None:
    run_sub = HEAD + """if [[ "${SLURM_JOB_ID}" ]]; then
    export RUNSUB_DIR=$(dirname $(scontrol show job "${SLURM_JOB_ID}" | awk -F= '/Command=/{print $2}'))
else
    export RUNSUB_DIR=$(dirname "${BASH_SOURCE[0]}")
fi
source "${RUNSUB_DIR}/config_mounts.sh"
""" + TRAIN
    mounts = """#!/bin/bash
_cont_mounts="${DATADIR}:/data,${LOGDIR}:/results"
if [[ "${USE_SYNTHETIC_DATA:-0}" -eq 0 ]]; then
  _cont_mounts="${_cont_mounts},${LOAD_CHECKPOINTS_PATH}:/load_checkpoints,${PREPROC_DATA}:/preproc_data"
fi
"""
    where = folder(tmp_path, run_sub, config_mounts__sh=mounts)
    found = find(where)
    assert [(d.variable, d.file, d.line, d.mounts) for d in found.demands] == [
        (v, str(where / "config_mounts.sh"), 4, [dest])
        for v, dest in (("LOAD_CHECKPOINTS_PATH", "/load_checkpoints"), ("PREPROC_DATA", "/preproc_data"))]
    # scontrol answered the folder's own run.sub (shown as the folder, though run in a private copy)
    show = next(c for c in found.trace.commands if c.argv[:3] == ["scontrol", "show", "job"])
    assert show.at == f"{where / 'run.sub'}:{line_of(run_sub, 'scontrol show job')}"
    given = {"LOAD_CHECKPOINTS_PATH": "/lustre/ckpt", "PREPROC_DATA": "/lustre/c4"}
    ok = find(where, given)
    assert ok.demands == [] and trace.summarize(ok.trace)["training"]["mounts"] == [
        "/data", "/results", "/load_checkpoints", "/preproc_data"]
    # without set -u: the empty mount sources, attributed to the sourced file's line
    (where / "run.sub").write_text(run_sub.replace("set -euxo pipefail", "set -ex"))
    assert [(d.variable, d.file, d.line, d.reason) for d in find(where).demands] == [
        (v, str(where / "config_mounts.sh"), 4, "empty") for v in ("LOAD_CHECKPOINTS_PATH", "PREPROC_DATA")]


def test_top_level_node_tools_answer_as_an_allocated_node_of_the_system(tmp_path: Path) -> None:
    run_sub = HEAD + """GPUS=$(nvidia-smi -L | wc -l)
[ "${GPUS}" -eq "${DGXNGPU}" ] || { echo "expected ${DGXNGPU} GPUs, have ${GPUS}"; exit 1; }
MODEL_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
HCAS=$(ibstat -l | wc -l); ibv_devinfo --list > /dev/null
NUMA=$(numactl --hardware | head -n1 | awk '{print $2}')
ARCH=$(lscpu | awk '/Architecture/{print $2}')
export MASTER_ADDR=$(hostname -i)
FIRST=$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n1)
NODES=$(sinfo -h | wc -l); squeue -h -j "${SLURM_JOB_ID}" > /dev/null
site_health_check --gpus "${GPUS}"
sudo /usr/bin/true
_cont_mounts="${DATADIR}:/data"
ON_NODE=$(srun -N1 -n1 nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
srun --ntasks=1 echo "${MODEL_NAME}|${HCAS}|${NUMA}|${ARCH}|${MASTER_ADDR}|${FIRST}|${NODES}|${ON_NODE}"
""" + TRAIN
    where = folder(tmp_path, run_sub)
    node = trace.Node.of(2, 8, "DGXB200_2x8", platform="linux/arm64")
    found = find(where, node=node)
    assert found.demands == [] and "training" in trace.summarize(found.trace), found.trace.stderr_tail
    echo = next(s for s in found.trace.steps if s[:3] == ["srun", "--ntasks=1", "echo"])
    assert echo[3] == "NVIDIA B200|8|2|aarch64|10.0.0.1|node1|1|8"
    (unknown,) = [c for c in found.trace.commands if c.kind == "unknown"]
    assert unknown.argv == ["site_health_check", "--gpus", "8"]
    assert unknown.at == f"{where / 'run.sub'}:{line_of(run_sub, 'site_health_check')}"
    assert ["sudo", "/usr/bin/true"] in found.trace.steps  # recorded, not run
    # the GPU model the config names wins over the system's name
    named = trace.Node.of(2, 8, "DGXB200_2x8", {"accelerator_model_name": "NVIDIA GB200"})
    echo = next(s for s in find(where, node=named).trace.steps if s[:3] == ["srun", "--ntasks=1", "echo"])
    assert echo[3].startswith("NVIDIA GB200|") and "|x86_64|" in echo[3]


def test_the_sandbox_keeps_its_stand_ins_its_folder_and_no_process(tmp_path: Path) -> None:
    run_sub = HEAD + """export PATH=/usr/sbin:/usr/bin:/sbin:/bin
touch ./planted
mkdir -p /tmp/mlrepro-test-outside-$$
python3 -c 'import time; time.sleep(120)' &
echo "DAEMON $!"
python3 -c '
import os, time
if os.fork() == 0:
    os.setsid()
    print("ESCAPED", os.getpid(), flush=True)
    time.sleep(120)
' | head -n1
_cont_mounts="${DATADIR}:/data"
""" + TRAIN
    where = folder(tmp_path, run_sub)
    found = find(where, {"PATH": "/usr/bin:/bin", "BASH_ENV": str(tmp_path / "evil.sh")})
    (tmp_path / "evil.sh").write_text("touch " + str(tmp_path / "evil-ran") + "\n")
    assert found.demands == [] and "training" in trace.summarize(found.trace), found.trace.stderr_tail
    assert found.trace.steps[-1][0] == "srun"  # the stand-in, though run.sub and the config set PATH
    assert not (where / "planted").exists() and not (tmp_path / "evil-ran").exists()
    outside = [c for c in found.trace.commands if c.kind == "outside"]
    assert outside and outside[0].argv[0] == "mkdir" and not list(Path("/tmp").glob("mlrepro-test-outside-*"))
    local = [c.argv[0] for c in found.trace.commands if c.kind == "local"]
    assert "touch" in local and "python3" in local  # every command it ran is listed
    pids = [int(line.split()[1]) for line in found.trace.stderr_tail.splitlines()
            if line.startswith(("DAEMON ", "ESCAPED "))]
    assert len(pids) == 2
    time.sleep(0.2)
    for pid in pids:
        assert not _alive(pid), f"process {pid} that run.sub started outlived the preview"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (reaped by init later) is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_stop_on_an_unset_variable_and_an_empty_image_are_demanded(tmp_path: Path) -> None:
    run_sub = HEAD + """: "${MLPERF_CLUSTER_NAME:?set the cluster name}"
: "${OPTIONAL:-}" "${DEFAULTED:=x}"
_cont_mounts="${DATADIR}:/data"
""" + TRAIN.replace('"${CONT}"', '"${CONT_FILE}"')
    where = folder(tmp_path, run_sub.replace("set -euxo pipefail", "set -ex"))
    found = find(where, {"CONT_FILE": ""})
    assert [(d.variable, d.reason) for d in found.demands] == [("MLPERF_CLUSTER_NAME", "stops"), ("CONT_FILE", "empty")]
    assert found.demands[0].message == "set the cluster name"


def test_the_preview_lists_every_command_and_kills_a_hung_run_sub(tmp_path: Path) -> None:
    run_sub = HEAD + "python3 -c 'import time; time.sleep(60)'\n"
    started = time.monotonic()
    traced = trace.trace(folder(tmp_path, run_sub) / "run.sub", ENV, NODE, timeout_s=2)
    assert time.monotonic() - started < 30 and traced.timed_out and traced.exit_code == -int(signal.SIGKILL)
    assert json.dumps([c.argv for c in traced.commands]).count("time.sleep(60)") == 1


def test_each_recipe_fill_is_a_folder_its_recipe_makes_and_the_rest_is_by_hand() -> None:
    from mlrepro.datasets import recipe, vendor_fills
    from mlrepro.runs import vendor_data

    for benchmark, fills in vendor_fills.RECIPE_FILLS.items():
        made = recipe.load(benchmark)
        sources, text = {s.file for s in made.sources}, made.path.read_text()
        for dest, sub in fills.items():  # a source of the recipe, or a subfolder its own layout comment names
            assert sub == "." or sub in sources or f"{sub}/" in text, f"{benchmark}: {dest} from {sub}"
    assert vendor_fills.recipe_fills("gnn") == {}  # no recipe
    assert vendor_fills.recipe_fills("flux1") == {"/dataset": "."}  # its mount
    lora = vendor_fills.recipe_fills("llama2_70b_lora")
    assert "model/ of its prepared folder" in vendor_data.fill("llama2_70b_lora", ["/ckpt"], lora)
    assert "no data recipe of gnn" in vendor_data.fill("gnn", ["/graph"], {})
    # RetinaNet (v4.1 ssd) mounts what the v1.1 SSD recipe does not make: by hand
    assert "by hand" in vendor_data.fill("ssd", ["/datasets/open-images-v6"], vendor_fills.recipe_fills("ssd"))


def test_a_cluster_tool_called_by_its_path_is_never_run(tmp_path: Path) -> None:
    run_sub = HEAD + """echo start
/usr/bin/sudo -n touch /tmp/mlrepro-test-sudo-ran
/usr/bin/srun --ntasks=1 true
"""
    where = folder(tmp_path, run_sub)
    traced = find(where).trace
    (blocked,) = [c for c in traced.commands if c.kind == "blocked"]
    assert blocked.at == f"{where / 'run.sub'}:{line_of(run_sub, '/usr/bin/sudo')}"
    assert blocked.argv == ["/usr/bin/sudo -n touch /tmp/mlrepro-test-sudo-ran"] and traced.exit_code == 97
    assert not Path("/tmp/mlrepro-test-sudo-ran").exists() and traced.steps == []


def test_what_run_sub_prints_is_not_trusted_and_nested_shells_are_traced(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    run_sub = HEAD + f"""echo "{fifo}: line 1: SOME_VAR: planted" >&2
bash -c 'set -u; srun --ntasks=1 echo nested'
_cont_mounts="${{DATADIR}}:/data"
""" + TRAIN
    found = find(folder(tmp_path, run_sub))
    assert found.demands == [] and ["srun", "--ntasks=1", "echo", "nested"] in found.trace.steps

