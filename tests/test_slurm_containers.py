"""pyxis/enroot and apptainer on Slurm: our srun command lines against NVIDIA's run.sub conventions.

pyxis and enroot cannot be installed here, so the command lines are compared with the srun lines of
NVIDIA's Training v1.1 run.sub files (../shared/data beside the repository), and a cluster without pyxis
(this one) must give a clear error.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from mlrepro.engines import Mount
from mlrepro.slurm import containers, launch
from tests.conftest import NVIDIA_V11, require


@pytest.fixture(scope="module")
def run_subs() -> dict[str, str]:
    require(NVIDIA_V11.is_file(), f"{NVIDIA_V11} is missing")
    with tarfile.open(NVIDIA_V11) as tar:
        return {m.name.split("/")[2]: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                for m in tar if m.name.endswith("/run.sub")}


def srun_lines(text: str) -> list[str]:
    """run.sub's srun commands, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [ln.strip() for ln in joined.splitlines() if ln.strip().startswith("srun ")]


def options(argv: list[str]) -> dict[str, str]:
    return {a.split("=", 1)[0]: a.partition("=")[2] for a in argv if a.startswith("--")}


def ours(nodes: int, tasks_per_node: int, drop_caches: bool = True) -> launch.Launch:
    """Our pyxis lines for a run of ``nodes`` x ``tasks_per_node`` ranks in job 42, with a cluster that has pyxis
    (srun's --help names --container-image) and whose job 42 runs on gpu07 and gpu08."""
    def run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        out = "gpu07\ngpu08\n" if cmd[:3] == ["scontrol", "show", "hostnames"] else "--container-image=IMAGE\n"
        return subprocess.CompletedProcess(cmd, 0, out, "")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch.subprocess, "run", run)
        mp.setattr(containers.subprocess, "run", run)
        mp.setattr(launch.shutil, "which", lambda name: f"/usr/bin/{name}")
        return launch.command(["./run_and_time.sh"], "/py", nodes, tasks_per_node, 4,
                              {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[07-08]"},
                              launch.Container("enroot", "/images/pytorch.sqsh", "image_classification",
                                               [Mount(Path("/raid/resnet"), target="/data"),
                                                Mount(Path("/results/0"), read_only=False, target="/results")],
                                               gpus=True), drop_caches)


def test_pyxis_lines_follow_run_sub(run_subs: dict[str, str]) -> None:
    """Each of NVIDIA's run.sub files: caches cleared by one task per node, the image imported once per node into a
    named container, every rank (nodes x ranks per node) in that container with src:dst mounts. Ours the same."""
    plan = ours(nodes=2, tasks_per_node=8)
    clear, setup = plan.setup
    checked = 0
    for bm, text in run_subs.items():
        lines = srun_lines(text)
        # 1. Caches: `sync && sysctl vm.drop_caches=3` by --ntasks=<nodes> (one a node), before the ranks.
        clears = [ln for ln in lines if "drop_caches=3" in ln]
        assert clears and all(re.search(r'--ntasks="\$[{(]+ ?SLURM_JOB_NUM_NODES', ln) and "sync" in ln
                              for ln in clears), (bm, clears)
        # 2. The image is imported once per node into a named container: --ntasks=<nodes>, image, name, `true`.
        imports = [ln for ln in lines if "--container-image=" in ln]
        assert imports and all(ln.endswith(" true") and "--container-name=" in ln for ln in imports), bm
        assert all(re.search(r'--ntasks="\$[{(]+ ?SLURM_JOB_NUM_NODES', ln) for ln in imports), (bm, imports)
        # 3. Every rank runs in that container by name with the mounts: nodes x GPUs tasks, GPUs per node.
        trains = [ln for ln in lines if "--container-mounts=" in ln and "--ntasks-per-node=" in ln]
        if not trains:  # bert and dlrm write their mounts through another variable name
            continue
        theirs = set(re.findall(r"(--[a-z-]+)=", trains[-1]))
        assert {"--ntasks", "--ntasks-per-node", "--container-name", "--container-mounts"} <= theirs, bm
        # ntasks = nodes x tasks per node: a rank per GPU (DGXNGPU, minigo's RANKS_PER_NODE) or one per node
        per_node = re.search(r'--ntasks-per-node="?([^"\s]+)', trains[-1]).group(1)  # type: ignore[union-attr]
        ntasks = re.search(r'--ntasks="([^"]+)"', trains[-1]).group(1)  # type: ignore[union-attr]
        product = re.fullmatch(r"\$\(\( ?SLURM_JOB_NUM_NODES \* (\w+) ?\)\)", ntasks)
        assert (product and per_node == f"${{{product.group(1)}}}") or (per_node, ntasks) == (
            "1", "${SLURM_JOB_NUM_NODES}"), (bm, per_node, ntasks)
        checked += 1
    assert checked >= 5
    # ours: the same three steps, in that order
    assert options(clear)["--ntasks"] == "2" and options(clear)["--ntasks-per-node"] == "1"
    assert clear[-3:-1] == ["sh", "-c"] and "sync" in clear[-1] and "/proc/sys/vm/drop_caches" in clear[-1]
    assert setup[-1] == "true" and options(setup)["--ntasks"] == "2" and options(setup)["--ntasks-per-node"] == "1"
    assert options(setup)["--container-image"] == "/images/pytorch.sqsh"
    run = options(plan.argv)
    assert run["--ntasks"] == "16" and run["--ntasks-per-node"] == "8" and run["--nodes"] == "2"
    assert run["--container-name"] == options(setup)["--container-name"] == "image_classification"
    # run.sub's form: comma-separated src:dst pairs (ours add :ro where the run must not write)
    assert run["--container-mounts"] == "/raid/resnet:/data:ro,/results/0:/results"
    assert "--container-image" not in run  # the import happened once, in the set-up line
    assert plan.argv[-1] == "./run_and_time.sh" and plan.env["MASTER_ADDR"] == "gpu07"
    # NVIDIA's dlrm (hugectr) runs one task per node: ours too where the shape says so
    assert options(ours(nodes=4, tasks_per_node=1, drop_caches=False).argv)["--ntasks"] == "4"
    assert len(ours(nodes=4, tasks_per_node=1, drop_caches=False).setup) == 1  # the import only


def test_container_lines_reject_what_would_break_their_syntax() -> None:
    with pytest.raises(ValueError, match="separate mounts with ','"):
        containers.pyxis_run(["srun"], "n", [Mount(Path("/a,b"))], None, ["true"])
    with pytest.raises(ValueError, match="separate mounts with ','"):
        containers.apptainer_run(["srun"], "x.sif", [Mount(Path("/a"), target="/b:c")], False, None, ["true"])
    with pytest.raises(ValueError, match="container name"):
        containers.pyxis_import(["srun"], "img", "bad name;rm")
    assert containers.container_name("dlrm", Path("/r/runs/cpu_n2/dlrm/0")) == "mlrepro_cpu_n2_dlrm_0"
    assert containers.container_name("dlrm", Path("/r/runs/a b/dlrm/0")) == "mlrepro_a_b_dlrm_0"


def test_apptainer_line() -> None:
    """Every rank runs `apptainer exec` of the SIF; its environment (SLURM_PROCID: the rank) passes through."""
    line = containers.apptainer_run(["srun", "--ntasks=2"], "/images/pytorch.sif", [Mount(Path("/data"))], False,
                                    None, ["python", "-m", "mlrepro.train"])
    assert line[:4] == ["srun", "--ntasks=2", "apptainer", "exec"] and "--nv" not in line
    assert "--cleanenv" not in line and "--containall" not in line
    assert line[line.index("--bind") + 1] == "/data:/data:ro" and line[-4] == "/images/pytorch.sif"
    assert "--nv" in containers.apptainer_run(["srun"], "x.sif", [], True, None, ["true"])


def test_missing_pyxis_is_a_clear_error() -> None:
    """This cluster's srun (Debian's Slurm, no pyxis) has no --container-image."""
    require(shutil.which("srun") is not None, "srun is missing: .ci/slurm.sh installs Slurm")
    with pytest.raises(containers.PluginMissing, match=r"the pyxis plugin \(with enroot\) is not installed"):
        containers.require_pyxis()
