"""run.sub as sbatch runs it (issue 42, item 3): the batch script's Slurm variables, rebuilt from the controller for
the executor's job, and the folder run.sub finds through `scontrol show job` (Command=). On the real Slurm:
tests/test_gpu_cluster.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlrepro.runs import driver
from mlrepro.slurm import launch
from tests.test_vendor_launch import _config, _folder, _plan


def fake_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\n"
        f'[ "$1 $2 $3 $4" = "show job -o 77" ] && echo "JobId=77 JobName=wrap UserId=root(0) Account=acct QOS=normal '
        f'JobState=RUNNING Partition=gpu NodeList=node[1-2] NumNodes=2 NumCPUs=8 Command={command} WorkDir=/submit"\n')
    (bin_dir / "scontrol").chmod(0o755)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 99\n")  # in an allocation (never called: refused before)
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_the_batch_scripts_variables_come_from_the_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_scontrol(tmp_path, monkeypatch, "(null)")
    env = launch.batch_env({"SLURM_JOB_ID": "77", "SLURM_SUBMIT_DIR": "/snakemake/workdir"}, tmp_path / "folder")
    assert env == {
        "SLURM_JOBID": "77", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NODELIST": "node[1-2]",
        "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2", "SLURM_JOB_PARTITION": "gpu",
        "SLURM_SUBMIT_DIR": str(tmp_path / "folder"),  # where the README submits run.sub from, not Snakemake's
        "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_GTIDS": "0",
        "SLURM_JOB_NAME": "wrap", "SLURM_JOB_ACCOUNT": "acct", "SLURM_JOB_QOS": "normal"}
    # the executor's --wrap job: Slurm names no script, so run.sub's dirname is ".", the folder it runs in
    assert launch.script_folder({"SLURM_JOB_ID": "77"}, tmp_path / "folder") == (tmp_path / "folder").resolve()


def test_a_run_sub_that_would_find_another_folder_through_slurm_is_refused(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    fake_scontrol(tmp_path, monkeypatch, "/spool/slurmd/job77/slurm_script")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    folder = _folder(tmp_path)
    run_sub = folder / "run.sub"
    run_sub.write_text(run_sub.read_text().replace(
        "set -euxo pipefail", 'set -euxo pipefail\nRUNSUB_DIR=$(dirname $(scontrol show job "${SLURM_JOB_ID}" | '
        "awk -F= '/Command=/{print $2}'))"))
    spec = _plan(_config(tmp_path, {"EXTRADIR": "/extra"}), tmp_path).launches.spec("sim_n1", "resnet")
    with pytest.raises(driver.RunFailed, match=r"names /spool/slurmd/job77 for this job, not .*vendor"):
        driver.execute_run_sub(spec, 1, "img.sqsh", tmp_path / "run", tmp_path / "log", None)
    assert not (tmp_path / "log").exists()  # run.sub never started
