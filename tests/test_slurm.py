"""The pipeline on a real one-node Slurm cluster with accounting (.ci/slurm.sh; CI starts it in .ci/run).

Slurm's own records (sacct, with job comments stored) decide what ran where, not the pipeline's word.
The executor plugin is installed for these tests only, into a folder on their snakemake's PYTHONPATH
(requirements-slurm.txt), so the rest of the suite never pays for its cluster probes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlrepro.runs import ledger
from mlrepro.slurm import checks
from mlrepro.slurm.jobs import parse_sacct
from mlrepro.slurm.resources import JobShape
from tests.conftest import SYSTEM, mini_launch, require

pytestmark = [pytest.mark.slurm, pytest.mark.integration]
REPO = Path(__file__).resolve().parent.parent
# Fast polling for a local cluster (the plugin's defaults wait 40 s between status checks), and jobs that ask for
# 1 GB, not the profile's 4 GB: .ci/slurm.sh's nodes share the host's memory (2/5 of 24 GB each on CI), so that 4 GB
# let two jobs run on a node at once, and a test's runs waited in the queue behind each other and behind the tests
# beside it (up to 5 minutes). Slurm only counts it here (no cgroup: nothing is limited or killed for memory), and
# no test checks it. MEM: a run's (config slurm.mem_mb), for the same reason.
POLL = ["--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "2",
        "--default-resources", "runtime=30", "mem_mb=1000"]
MEM = 1000
# `snakemake` whose Slurm plugin checks the jobs' states every 2 s at most (its own back-off grows to 180 s while no
# job ends): tests/slurm_snakemake.py says why, and that what the plugin asks and reports is unchanged.
SNAKEMAKE = [sys.executable, "-m", "tests.slurm_snakemake"]


@pytest.fixture(scope="session")
def cluster() -> None:
    up = shutil.which("scontrol") is not None and subprocess.run(
        ["scontrol", "ping"], capture_output=True, text=True, timeout=30, check=False).stdout.count("UP") > 0
    require(up, "no Slurm controller answers: start one with `eval \"$(.ci/slurm.sh start)\"`")


@pytest.fixture(scope="session")
def plugin(cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("slurm-plugin")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    "-r", str(REPO / "requirements-slurm.txt")], check=True, timeout=300)
    return target


def snakemake_slurm(plugin: Path, workdir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    # timeout: a guard against a hang, not a speed target (a loaded 2-core machine took over 420 s)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin), str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(workdir / "config.yaml"), "--profile", str(REPO / "profiles" / "slurm"), *POLL,
         *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def write_config(workdir: Path, config: dict[str, Any]) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))


def sacct(*args: str) -> str:
    return subprocess.run(["sacct", "-P", "-n", *args], capture_output=True, text=True, check=True).stdout


def sacct_until(job_ids: list[str], done: set[str], seconds: float = 30) -> dict[str, Any]:
    """A job reaches sacct a few seconds after it ends: poll."""
    deadline = time.time() + seconds
    while True:
        states = parse_sacct(sacct("-X", "-o", "JobIDRaw,State,NodeList,Elapsed,ExitCode", "-j", ",".join(job_ids)))
        if all(j in states and states[j].state in done for j in job_ids) or time.time() > deadline:
            return states
        time.sleep(1)


def comments(job_ids: list[str]) -> dict[str, str]:
    rows = sacct("-X", "-o", "JobIDRaw,Comment", "-j", ",".join(job_ids)).splitlines()
    return dict(row.split("|", 1) for row in rows if row)


def test_pipeline_through_slurm(plugin: Path, tmp_path: Path) -> None:
    """Every run a Slurm job of its shape (dlrm: 2 processes through srun), checkers pass, the report names
    each job; the 2-process run ends on the metric of a 1-process run with the same seed and global batch.
    One run of each benchmark: that each run of a benchmark is a job of its own is test_cancelled_and_timed_out_runs'
    claim (one of two resnet runs cancelled, the other finished and kept) and test_two_systems_in_one_submission's."""
    write_config(tmp_path, {
        "only": ["resnet", "dlrm"], "allow_fewer_runs": True, "telemetry": {"enabled": False},
        "inference": {"benchmarks": []},  # LoadGen is tests/test_inference.py's
        "slurm": {"account": "root", "exclusive": False, "mem_mb": MEM},
        "benchmarks": {"resnet": {"runs": 1},
                       "dlrm": {"runs": 1, "max_epochs": 3, "data": {"train_samples": 4096, "eval_samples": 1024}}},
        "job_shapes": {"dlrm": {"tasks_per_node": 2, "walltime": "00:10:00"}},
    })
    start = time.time()
    proc = snakemake_slurm(plugin, tmp_path)
    wall = time.time() - start
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = tmp_path / "results"
    runs = {(b, i): json.loads((out / "runs" / SYSTEM / b / str(i) / "run.json").read_text())
            for b, i in [("resnet", 0), ("dlrm", 0)]}
    ids = [r["slurm"]["job_id"] for r in runs.values()]
    assert len(set(ids)) == 2
    states = sacct_until(ids, {"COMPLETED"})
    assert {states[j].state for j in ids} == {"COMPLETED"}, states
    # Slurm's record of which rule each job ran (the plugin's job comment), not the pipeline's word.
    assert comments(ids) == {runs[k]["slurm"]["job_id"]: f"rule_run_wildcards_{SYSTEM}_{k[0]}_{k[1]}" for k in runs}
    for b, i in runs:
        assert json.loads((out / "compliance" / SYSTEM / b / f"{i}.json").read_text())["valid"], (b, i)
    report = (out / "report.html").read_text()
    for job_id in ids:
        assert re.search(rf"job {job_id} on \w+ · COMPLETED", report), job_id

    # dlrm: one job of 2 tasks; its srun step started both ranks; rank 0 alone wrote the MLPerf log.
    dlrm = runs[("dlrm", 0)]
    steps = {row.split("|")[0]: row.split("|")[1] for row in
             sacct("-o", "JobID,NTasks", "-j", dlrm["slurm"]["job_id"]).splitlines()}
    assert "2" in steps.values(), steps
    assert dlrm["processes"] == 2
    run_dir = out / "runs" / SYSTEM / "dlrm" / "0"
    log = (run_dir / "result.txt").read_text()
    assert log.count('"key": "run_start"') == 1 and log.count('"key": "run_stop"') == 1
    names = {p.name for p in run_dir.iterdir() if p.is_file()}
    assert {"result.txt", "run.json", "slurm_job.json", "train.log", "ledger.jsonl"} <= names, names
    assert names <= {"result.txt", "run.json", "slurm_job.json", "train.log", "ledger.jsonl", "checkpoint.pt"}, names
    start1 = time.time()
    single = tmp_path / "single"
    subprocess.run([sys.executable, *mini_launch("dlrm", _params(tmp_path, "dlrm"), out / "data" / "dlrm", tmp_path),
                    "--seed", str(dlrm["seed"]), "--run-dir", str(single)],
                   check=True, timeout=300, env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")})
    one = json.loads((single / "run.json").read_text())
    assert one["processes"] == 1 and one["epochs"] == dlrm["epochs"]
    # Same steps on the same global batches; only the order of float sums differs (two shards, one all-reduce).
    assert abs(one["final_metric"] - dlrm["final_metric"]) < 1e-5, (one["final_metric"], dlrm["final_metric"])
    print(f"\nslurm pipeline wall {wall:.1f}s; dlrm 1 process {one['time_to_train_ms']} ms, "
          f"2 processes {dlrm['time_to_train_ms']} ms (1-process run {time.time() - start1:.1f}s)")


def _params(workdir: Path, benchmark: str) -> dict[str, Any]:
    from mlrepro import config as mlconfig
    raw = {**yaml.safe_load((REPO / "config" / "config.yaml").read_text()),
           **yaml.safe_load((workdir / "config.yaml").read_text())}
    return mlconfig.load(raw)[1][benchmark].params


def test_cancelled_and_timed_out_runs(plugin: Path, tmp_path: Path) -> None:
    """scancel of one run and a run past its 1-minute walltime: reported with Slurm's state, the finished run
    kept, and the next invocation schedules only the two that did not finish. The run that times out is an
    implementation folder's run_and_time.sh that sleeps: until slurmctld ends it (60 to 90 s, its time-limit check
    runs every 30 s) it takes no CPU from the tests beside it, where a training that never converges took a core."""
    impl = tmp_path / "outlasting"
    impl.mkdir()
    (impl / "Dockerfile").write_text("FROM scratch\n")  # an implementation folder's; its runs here are native
    (impl / "config_CPU.sh").write_text("export DGXNNODES=1\nexport DGXNGPU=0\n")
    (impl / "run_and_time.sh").write_text("#!/bin/bash\necho 'a run that outlasts its walltime'\nexec sleep 600\n")
    (impl / "run_and_time.sh").chmod(0o755)
    (tmp_path / "data").mkdir()
    write_config(tmp_path, {
        "only": ["resnet", "dlrm"], "allow_fewer_runs": True, "telemetry": {"enabled": False},
        "inference": {"benchmarks": []},  # LoadGen is tests/test_inference.py's
        "slurm": {"account": "root", "exclusive": False, "mem_mb": MEM},
        "benchmarks": {"resnet": {"runs": 2}, "dlrm": {"runs": 1, "implementation": str(impl),
                                                      "system_config": "config_CPU.sh", "data_dir": "data"}},
        "job_shapes": {"dlrm": {"walltime": "00:01:00"}},
    })
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin), str(REPO), os.environ.get("PYTHONPATH")]))}
    argv = [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
            "--configfile", str(tmp_path / "config.yaml"), "--profile", str(REPO / "profiles" / "slurm"), *POLL]
    with subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        cancelled = None
        deadline = time.time() + 240
        while cancelled is None and time.time() < deadline and p.poll() is None:
            queue = subprocess.run(["squeue", "-h", "-o", "%i|%k|%T|%Z"], capture_output=True, text=True).stdout
            for line in queue.splitlines():
                job_id, comment, state, workdir = line.split("|", 3)
                match = re.fullmatch(rf"rule_run_wildcards_{re.escape(SYSTEM)}_resnet_(\d)", comment)
                # this test's own job (its workdir): another test's runs of the same rule may be in the queue
                if match and state == "RUNNING" and workdir in (str(tmp_path), str(tmp_path.resolve())):
                    # inside the run: poll until its driver has started (it writes the ledger's launch line)
                    started = tmp_path / "results" / "runs" / SYSTEM / "resnet" / match.group(1) / ledger.LEDGER
                    while not started.is_file():
                        assert time.time() < deadline and p.poll() is None, f"{started} never appeared"
                        time.sleep(0.1)
                    subprocess.run(["scancel", job_id], check=True)
                    cancelled = (job_id, match.group(1))
                    break
            time.sleep(0.5)
        _, stderr = p.communicate(timeout=300)
    assert cancelled is not None, stderr[-4000:]
    assert p.returncode != 0
    job_id, cancelled_run = cancelled
    finished_run = "1" if cancelled_run == "0" else "0"
    out = tmp_path / "results"
    dlrm_job = json.loads((out / "runs" / SYSTEM / "dlrm" / "0" / "slurm_job.json").read_text())["job_id"]
    states = sacct_until([job_id, dlrm_job], {"CANCELLED", "TIMEOUT"})
    assert states[job_id].state == "CANCELLED" and states[dlrm_job].state == "TIMEOUT", states
    # Reported with Slurm's state, run by run (the Snakefile's onerror, from sacct).
    assert re.search(rf"resnet run {cancelled_run}: Slurm job {job_id} on \w+: CANCELLED", stderr), stderr[-3000:]
    assert re.search(rf"dlrm run 0: Slurm job {dlrm_job} on \w+: TIMEOUT", stderr), stderr[-3000:]
    # Nothing half-written; the finished run is untouched by the next invocation's plan.
    for b, i in [("resnet", cancelled_run), ("dlrm", "0")]:
        run_dir = out / "runs" / SYSTEM / b / i
        assert not (run_dir / "result.txt").exists() and not (run_dir / "run.json").exists()
    kept = out / "runs" / SYSTEM / "resnet" / finished_run / "result.txt"
    assert kept.is_file() and json.loads(kept.with_name("run.json").read_text())["status"] == "success"
    plan = snakemake_slurm(plugin, tmp_path, "-n")
    assert plan.returncode == 0, plan.stderr[-3000:]
    planned = set(re.findall(r"rule run:\n(?:.*\n)*?\s+wildcards: system=\S+, benchmark=(\w+), run=(\d+)", plan.stdout))
    assert planned == {("resnet", cancelled_run), ("dlrm", "0")}, plan.stdout[-3000:]


def test_presubmit_checks_against_the_cluster(cluster: None) -> None:
    """One-line errors before anything is submitted: a missing partition, a shape too large, no commands."""
    with pytest.raises(checks.PreflightError, match=r"^Slurm: partition 'nope' .* does not exist; this cluster has: "):
        checks.check({"resnet": JobShape()}, "nope", 1)
    with pytest.raises(checks.PreflightError, match=r"job shape of dlrm .* too large: 300 nodes, partition \w+ has"):
        checks.check({"dlrm": JobShape(nodes=300)}, None, 1)
    with pytest.raises(checks.PreflightError, match=r"processes x 1 threads per node, the nodes of partition"):
        checks.check({"dlrm": JobShape(tasks_per_node=1000)}, None, 1)
    with pytest.raises(checks.PreflightError, match=r"GPUs per node"):
        checks.check({"dlrm": JobShape(gpus_per_node=8)}, None, 1)
    with pytest.raises(checks.PreflightError, match=r"^Slurm: sbatch, srun, squeue, sacct, scontrol, sinfo not found"):
        checks.check({"resnet": JobShape()}, None, 1, which=lambda _: None)
    checks.check({"resnet": JobShape(), "dlrm": JobShape(tasks_per_node=2)}, None, 1)  # fits
    # several processes in a container: pyxis (this cluster has none) or apptainer; docker runs one per run
    with pytest.raises(checks.PreflightError, match=r"the pyxis plugin \(with enroot\) is not installed"):
        checks.check({"dlrm": JobShape(tasks_per_node=2)}, None, 1, engine="enroot")
    with pytest.raises(checks.PreflightError, match=r"^Slurm: dlrm run several processes .* engine docker runs one"):
        checks.check({"resnet": JobShape(), "dlrm": JobShape(tasks_per_node=2)}, None, 1, engine="docker")
    checks.check({"dlrm": JobShape(tasks_per_node=2)}, None, 1, engine="apptainer")
    checks.check({"resnet": JobShape()}, None, 1, engine="enroot")  # one process: the enroot engine itself


def jobs_from(workdir: Path, since: str) -> list[str]:
    """The Slurm jobs submitted from ``workdir`` (or a folder in it) since ``since`` (sacct's -S): each job's working
    directory is where it was submitted from, or what the executor plugin sets (`sbatch -D <the workflow's workdir>`),
    so another test's jobs, submitted at the same time to the same cluster, are not among them. Both the controller's
    record (squeue keeps an ended job for MinJobAge seconds) and the accounting's (which may lag behind it)."""
    folders = {str(workdir), str(workdir.resolve())}
    queued = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%Z"], capture_output=True, text=True,
                            check=True).stdout
    recorded = sacct("-X", "-a", "-S", since, "-o", "JobIDRaw,WorkDir")
    rows = [row.split("|", 1) for row in (queued + recorded).splitlines() if row]
    return sorted({job for job, where in rows if any(where == f or where.startswith(f"{f}/") for f in folders)})


def test_bad_partition_stops_before_any_job(plugin: Path, tmp_path: Path) -> None:
    write_config(tmp_path, {"only": ["resnet"], "allow_fewer_runs": True, "benchmarks": {"resnet": {"runs": 1}},
                            "slurm": {"partition": "nope", "account": "root"}})
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    proc = snakemake_slurm(plugin, tmp_path, timeout=120)
    assert proc.returncode != 0
    assert "error: Slurm: partition 'nope' (config slurm.partition) does not exist" in proc.stderr
    assert jobs_from(tmp_path, since) == []  # nothing was submitted (by this test: others share the cluster)
