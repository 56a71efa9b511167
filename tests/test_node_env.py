"""arm64 nodes (issue 42, item 7): the pipeline's processes on a node run from a venv of its architecture, chosen on
the node by ``uname -m`` from ``slurm.node_venvs`` (mlrepro/slurm/node_env.py, profiles/slurm-multiarch). Tested
here: the choice per system (planning, refusal), the chooser script, the build job's command, and on the real
Slurm a job started through the chooser. An arm64 node itself is not here: that its venv runs there is untested."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlrepro.slurm import node_env
from tests import test_slurm
from tests.test_slurm import POLL, SNAKEMAKE, write_config
from tests.test_vendor_launch import _config, _folder, _plan

REPO = Path(__file__).resolve().parent.parent
cluster, plugin = test_slurm.cluster, test_slurm.plugin
__all__ = ["cluster"]


def test_a_systems_nodes_run_the_venv_of_their_architecture(tmp_path: Path) -> None:
    assert node_env.machine("linux/arm64") == "aarch64" and node_env.machine(None, "x86_64") == "x86_64"
    x86 = node_env.for_system(None, None, tmp_path / ".venv", login="x86_64")
    assert x86.venv == str(tmp_path / ".venv") and x86.machine == "x86_64"
    with pytest.raises(node_env.NodeEnvError, match="aarch64 nodes cannot run this checkout's venv"):
        node_env.for_system("linux/arm64", None, tmp_path / ".venv", login="x86_64")
    (tmp_path / "venvs" / "aarch64" / "bin").mkdir(parents=True)
    (tmp_path / "venvs" / "aarch64" / "bin" / "python").touch()
    gb200 = node_env.for_system("linux/arm64", str(tmp_path / "venvs"), tmp_path / ".venv", login="x86_64")
    assert (gb200.venv, gb200.built) == (str(tmp_path / "venvs" / "aarch64"), True)
    assert "activate" in gb200.chosen_by
    assert node_env.for_system(None, str(tmp_path / "venvs"), tmp_path / ".venv", login="x86_64").built is False


def test_planning_names_each_systems_environment_and_refuses_one_its_nodes_cannot_run(tmp_path: Path) -> None:
    _folder(tmp_path)
    raw = _config(tmp_path, {"EXTRADIR": "/extra"})
    other = "linux/arm64" if node_env.machine(None) != "aarch64" else "linux/amd64"
    raw["systems"]["sim_n2"]["platform"] = other
    plan = _plan(raw, tmp_path)
    with pytest.raises(node_env.NodeEnvError, match=r"systems\.sim_n2: .*set slurm\.node_venvs"):
        _ = plan.node_environments
    assert "set slurm.node_venvs" in plan.launches.cluster_preview("sim_n2", "resnet")["node_environment"]["error"]
    raw["slurm"] = {"node_venvs": str(tmp_path / "venvs")}
    envs = _plan(raw, tmp_path).node_environments
    assert envs["sim_n2"].venv == str(tmp_path / "venvs" / node_env.machine(other))
    assert envs["sim_n1"].venv == str(tmp_path / "venvs" / node_env.machine(None))
    shown = _plan(raw, tmp_path).launches.cluster_preview("sim_n2", "resnet")["node_environment"]
    assert shown["machine"] == node_env.machine(other) and shown["built"] is False


def fake_uname(tmp_path: Path, machine: str) -> dict[str, str]:
    bin_dir = tmp_path / f"bin-{machine}"
    bin_dir.mkdir()
    (bin_dir / "uname").write_text(f"#!/bin/sh\necho {machine}\n")
    (bin_dir / "uname").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_the_chooser_sources_the_nodes_own_venv_or_stops_naming_the_build(tmp_path: Path) -> None:
    root = tmp_path / "venv s"  # a space: the path is quoted
    bin_dir = root / "aarch64" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/sh\n")
    (bin_dir / "python").chmod(0o755)
    (bin_dir / "activate").write_text('PICKED="$_mlrepro_venv"\n')
    (root / "activate").write_text(node_env.chooser(root))
    script = f'. {str(root / "activate")!r} && echo "picked $PICKED"'
    ok = subprocess.run(["sh", "-c", script], env=fake_uname(tmp_path, "aarch64"), capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip() == f"picked {root / 'aarch64'}", ok
    assert f"(aarch64) runs {bin_dir / 'python'}" in ok.stderr
    missing = subprocess.run(["sh", "-c", script], env=fake_uname(tmp_path, "riscv64"), capture_output=True, text=True)
    assert missing.returncode == 1 and "picked" not in missing.stdout
    assert f"no venv for riscv64 at {root / 'riscv64'}" in missing.stderr and "node_env build" in missing.stderr


def test_the_build_job_runs_on_a_node_of_that_architecture(tmp_path: Path) -> None:
    argv = node_env.build_argv(tmp_path / "venvs", "aarch64", REPO, ["--partition=gb200"])
    assert argv[:2] == ["sbatch", "--wait"] and "--partition=gb200" in argv
    wrap = next(a for a in argv if a.startswith("--wrap="))
    assert 'test "$(uname -m)" = aarch64' in wrap  # refuses a node of another architecture
    assert f"python3 -m venv {tmp_path / 'venvs' / 'aarch64'}" in wrap and f"-e {REPO}" in wrap


@pytest.mark.slurm
@pytest.mark.integration
def test_a_job_starts_through_the_chooser_on_the_real_slurm(plugin: Path, tmp_path: Path) -> None:
    """profiles/slurm-multiarch on this x86_64 cluster: a job's Snakemake runs from <node_venvs>/x86_64 (here a
    link to the checkout's venv), picked on its node."""
    venvs = tmp_path / "venvs"
    venvs.mkdir()
    (venvs / os.uname().machine).symlink_to(Path(sys.executable).parent.parent)
    (venvs / "activate").write_text(node_env.chooser(venvs))
    write_config(tmp_path, {"only": ["resnet"], "inference": {"benchmarks": []}, "telemetry": {"enabled": False},
                            "slurm": {"account": "root", "node_venvs": str(venvs)}})
    env = {**os.environ, "MLREPRO_NODE_VENVS": str(venvs), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin), str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
         "--configfile", str(tmp_path / "config.yaml"), "--profile", str(REPO / "profiles" / "slurm-multiarch"),
         *POLL, "--slurm-keep-successful-logs", "results/pipeline_info/environment.json"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-6000:]
    logs = "".join(p.read_text() for p in (tmp_path / ".snakemake" / "slurm_logs").rglob("*.log"))
    assert f"({os.uname().machine}) runs {venvs / os.uname().machine / 'bin' / 'python'}" in logs, logs[-3000:]
