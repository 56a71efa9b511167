"""One run over two nodes of a real Slurm cluster (`SLURM_NODES=2 .ci/slurm.sh start`: two slurmds, each with its
own host name and address): the run driver in a 2-node job starts a rank on each node with srun, the ranks meet
at the first host, rank 0 alone writes the MLPerf log, and a rank that fails fails the run, naming its node.

Slurm's own records (sacct's job steps) say which nodes took part, not the pipeline's word.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mlrepro.slurm.jobs import parse_sacct
from tests import test_slurm
from tests.conftest import REPO, SYSTEM, mini_launch, require
from tests.test_slurm import sacct_until, snakemake_slurm, write_config

pytestmark = [pytest.mark.slurm, pytest.mark.integration]
cluster, plugin = test_slurm.cluster, test_slurm.plugin  # the executor plugin, installed once for these tests
UP = (["idle"], ["mixed"], ["allocated"], ["completing"])  # sinfo's %T of a node that takes jobs
# sacct's state of a job that has ended (mlrepro/slurm/jobs.py: the word, without "by <uid>")
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}


@pytest.fixture(scope="module")
def two_nodes() -> list[str]:
    """The nodes that are up, where there are two or more; a clear failure on CI, a skip elsewhere."""
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except FileNotFoundError:
        out = ""
    nodes = sorted({line.split()[0] for line in out.splitlines() if line.split()[1:] in UP})
    require(len(nodes) >= 2, f"needs a Slurm cluster of 2 nodes that are up (found {nodes or 'none'}): "
            "`SLURM_NODES=2 .ci/slurm.sh start`")
    return nodes


def sbatch(tmp: Path, argv: list[str], nodes: int = 2) -> tuple[str, int]:
    """One batch job over ``nodes`` nodes running ``argv`` (as the executor plugin runs a run: its script on the
    first node, without the allocation's node list in its environment), waited for; its id and exit status."""
    script = tmp / "job.sh"
    script.write_text("#!/bin/sh\nunset SLURM_JOB_NODELIST SLURM_NODELIST SLURM_NNODES SLURM_NTASKS\n"
                      f"exec {shlex.join(argv)}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    submitted = subprocess.run(["sbatch", "--parsable", f"--nodes={nodes}", "--ntasks-per-node=1", "--mem=2000",
                                "--time=10", f"--output={tmp / 'job.out'}", str(script)],
                               capture_output=True, text=True, env=env, timeout=60, check=True)
    job_id = submitted.stdout.strip().split(";")[0]
    return job_id, job_exit_status(job_id)


def job_exit_status(job_id: str, seconds: float = 600) -> int:
    """Wait for the job to end, in the controller and then in the accounting (sacct's record of the job and its steps
    trails the controller's: ci9 read RUNNING from sacct after the controller had ended the job); its exit status, as
    `sbatch --wait` returns it (1 for a job ended by a signal). Polled every half second: `sbatch --wait` looks after
    2, 10 and 42 s, so that a job of 11 s took 42."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        shown = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True,
                               check=True).stdout
        state = re.search(r"\bJobState=(\S+)", shown)
        if state and state.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"):
            code, signal = re.search(r"\bExitCode=(\d+):(\d+)", shown).groups()  # type: ignore[union-attr]
            recorded = sacct_until([job_id], ENDED, max(deadline - time.time(), 30))
            assert job_id in recorded and recorded[job_id].state in ENDED, \
                f"Slurm job {job_id} ended ({state.group(1)}) but sacct still says {recorded.get(job_id)}"
            return int(code) if signal == "0" else 1
        time.sleep(0.5)
    raise AssertionError(f"Slurm job {job_id} still running after {seconds} s")


def steps(job_id: str) -> dict[str, tuple[str, str]]:
    """sacct's record of the job's steps: step id -> (node list, tasks)."""
    out = subprocess.run(["sacct", "-P", "-n", "-j", job_id, "-o", "JobID,NodeList,NTasks"], capture_output=True,
                         text=True, check=True).stdout
    return {row.split("|")[0]: (row.split("|")[1], row.split("|")[2]) for row in out.splitlines() if row}


def test_a_run_over_two_nodes(two_nodes: list[str], tmp_path: Path) -> None:
    params = yaml.safe_load((REPO / "minis" / "dlrm" / "defaults.yaml").read_text())
    params.update(max_epochs=2, target=0.999, data={**params["data"], "train_samples": 2048, "eval_samples": 512})
    subprocess.run([sys.executable, "-m", "mlrepro.datasets.generated", "--benchmark", "dlrm", "--out",
                    str(tmp_path / "data"), "--params", json.dumps(params), "--seed", "3"], check=True,
                   capture_output=True)
    run_dir = tmp_path / "run"
    driver = [sys.executable, *mini_launch("dlrm", params, tmp_path / "data", tmp_path, nodes=2, drop_caches=True),
              "--seed", "11", "--run-dir", str(run_dir)]
    job_id, code = sbatch(tmp_path, driver)
    assert code == 0, (tmp_path / "job.out").read_text()[-3000:] + (run_dir / "train.log").read_text()[-3000:]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["processes"] == 2
    assert run["slurm"]["job_id"] == job_id
    # the node list came from the controller (the job's script had none in its environment)
    hosts = subprocess.run(["scontrol", "show", "hostnames", run["slurm"]["node_list"]], capture_output=True,
                           text=True, check=True).stdout.split()
    assert len(hosts) == 2 and set(hosts) <= set(two_nodes), run["slurm"]
    # Slurm's record: the caches were cleared by one task on each node, then one step ran a rank on each node.
    recorded = steps(job_id)
    per_node = [(nodes, tasks) for step, (nodes, tasks) in recorded.items() if step.startswith(f"{job_id}.")
                and step.split(".")[1].isdigit()]
    assert per_node == [(run["slurm"]["node_list"], "2")] * 2, recorded
    log = (run_dir / "train.log").read_text()
    assert sorted(line.split()[-1] for line in log.splitlines() if line.startswith("drop_caches: ")) == hosts, log
    result = (run_dir / "result.txt").read_text()
    assert result.count('"key": "run_start"') == 1 and result.count('"key": "run_stop"') == 1  # rank 0 alone
    # The ranks took the steps of one process on the same global batches: their gradients met across the hosts.
    single = tmp_path / "single"
    subprocess.run([sys.executable, *mini_launch("dlrm", params, tmp_path / "data", tmp_path), "--seed", "11",
                    "--run-dir", str(single)], check=True, timeout=300,
                   env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"})
    one = json.loads((single / "run.json").read_text())
    assert one["processes"] == 1 and one["epochs"] == run["epochs"] == 2
    assert abs(one["final_metric"] - run["final_metric"]) < 1e-5, (one["final_metric"], run["final_metric"])


def test_a_failed_rank_fails_the_run_naming_its_node(two_nodes: list[str], tmp_path: Path) -> None:
    """The rank on the second node exits 3 at once; the first would run for minutes: srun ends it, and the
    driver's error names the node whose task failed."""
    impl = tmp_path / "impl"
    impl.mkdir()
    (impl / "run_and_time.sh").write_text('#!/bin/bash\nif [ "$SLURM_PROCID" = 1 ]; then echo "rank 1 fails on '
                                          '$(hostname)"; exit 3; fi\nsleep 300\n')
    launch_args = mini_launch("dlrm", {}, tmp_path, tmp_path, nodes=2)
    launch_file = Path(launch_args[launch_args.index("--launch") + 1])
    launch = json.loads(launch_file.read_text())
    launch_file.write_text(json.dumps({**launch, "kind": "vendor", "folder": str(impl)}))
    run_dir = tmp_path / "run"
    job_id, code = sbatch(tmp_path, [sys.executable, *launch_args, "--seed", "1", "--run-dir", str(run_dir)])
    assert code != 0
    out = (tmp_path / "job.out").read_text()
    second = subprocess.run(["scontrol", "show", "hostnames", json.loads(
        (run_dir / "slurm_job.json").read_text())["node_list"]], capture_output=True, text=True).stdout.split()[1]
    assert "exited with status" in out and f"(task 1 on {second}: Exited with exit code 3" in out, out[-3000:]
    states = parse_sacct(subprocess.run(["sacct", "-X", "-P", "-n", "-o", "JobIDRaw,State,NodeList,Elapsed,ExitCode",
                                         "-j", job_id], capture_output=True, text=True, check=True).stdout)
    assert states[job_id].state == "FAILED", states  # sbatch (above) waited for sacct's record of the job's end
    assert not (run_dir / "run.json").exists() and not (run_dir / "result.txt").exists()


def test_pipeline_with_a_two_node_run(two_nodes: list[str], plugin: Path, tmp_path: Path) -> None:
    """`snakemake --profile profiles/slurm` with dlrm's job shape at 2 nodes: its run is one Slurm job over both
    nodes (the executor plugin's sbatch), whose srun step ran a rank on each; the package checks pass; its telemetry
    names both hosts, and the report shows them per node (tests/test_slurm_telemetry.py)."""
    write_config(tmp_path, {
        "only": ["dlrm"], "allow_fewer_runs": True, "telemetry": {"enabled": True, "hz": 5},
        "inference": {"benchmarks": []},  # LoadGen is tests/test_inference.py's (3 epochs do not converge)
        "slurm": {"account": "root", "exclusive": False},
        # a run of about 2 s: its telemetry samples host memory once a second
        "benchmarks": {"dlrm": {"runs": 1, "max_epochs": 3, "data": {"train_samples": 16384, "eval_samples": 1024}}},
        "job_shapes": {"dlrm": {"nodes": 2, "walltime": "00:10:00", "mem_mb": 2000}},
    })
    proc = snakemake_slurm(plugin, tmp_path)
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = tmp_path / "results"
    run = json.loads((out / "runs" / SYSTEM / "dlrm" / "0" / "run.json").read_text())
    job_id = run["slurm"]["job_id"]
    assert run["processes"] == 2 and len(subprocess.run(
        ["scontrol", "show", "hostnames", run["slurm"]["node_list"]], capture_output=True, text=True,
        check=True).stdout.split()) == 2, run["slurm"]
    states = sacct_until([job_id], {"COMPLETED"})
    assert states[job_id].state == "COMPLETED" and states[job_id].node_list == run["slurm"]["node_list"], states
    assert (run["slurm"]["node_list"], "2") in steps(job_id).values(), steps(job_id)  # the ranks' srun step
    assert json.loads((out / "compliance" / SYSTEM / "dlrm" / "0.json").read_text())["valid"]
    from tests.test_slurm_telemetry import assert_per_node_telemetry

    assert_per_node_telemetry(out, out / "runs" / SYSTEM / "dlrm" / "0")
