"""pyxis/enroot and apptainer on Slurm: our srun command lines against NVIDIA's run.sub conventions.

pyxis and enroot cannot be installed here, so the command lines are compared with the srun lines of
NVIDIA's Training v1.1 run.sub files (../shared/data beside the repository), and a cluster without pyxis
(this one) must give a clear error.
"""

from __future__ import annotations

import re
import shutil
import tarfile
from pathlib import Path

import pytest

from mlrepro.engines import Mount
from mlrepro.slurm import containers
from tests.conftest import require

REPO = Path(__file__).resolve().parent.parent
NVIDIA_V11 = REPO.parent / "shared" / "data" / "mlperf_training_nvidia_implementations_v1.1.tar.xz"


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


def test_pyxis_lines_follow_run_sub(run_subs: dict[str, str]) -> None:
    setup, run = containers.pyxis("/images/pytorch.sqsh", "image_classification",
                                  [Mount(Path("/data/resnet")), Mount(Path("/results/0"), read_only=False)],
                                  nodes=2, tasks_per_node=8, argv=["python", "-m", "mlrepro.train"])
    checked = 0
    for bm, text in run_subs.items():
        lines = srun_lines(text)
        # 1. The image is imported once per node into a named container: --ntasks=<nodes>, image, name, `true`.
        imports = [ln for ln in lines if "--container-image=" in ln]
        assert imports and all(ln.endswith(" true") and "--container-name=" in ln for ln in imports), bm
        assert all(re.search(r'--ntasks="\$[{(]+ ?SLURM_JOB_NUM_NODES', ln) for ln in imports), (bm, imports)
        assert setup[-1] == "true" and setup[1] == "--ntasks=2"
        assert set(options(setup)) >= {"--container-image", "--container-name", "--ntasks"}
        # 2. Every rank runs in that container by name with the mounts: nodes x GPUs tasks, GPUs per node.
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
    ours = options(run)
    assert ours["--ntasks"] == "16" and ours["--ntasks-per-node"] == "8"
    assert ours["--container-name"] == options(setup)["--container-name"] == "image_classification"
    # run.sub's form: comma-separated src:dst pairs (ours add :ro where the run must not write)
    assert ours["--container-mounts"] == "/data/resnet:/data/resnet:ro,/results/0:/results/0"
    assert "--container-image" not in ours  # the import happened once, in the set-up line
    assert run[-3:] == ["python", "-m", "mlrepro.train"]


def test_pyxis_rejects_what_would_break_its_syntax() -> None:
    with pytest.raises(ValueError, match="pyxis separates mounts"):
        containers.pyxis("img", "n", [Mount(Path("/a,b"))], 1, 1, ["true"])
    with pytest.raises(ValueError, match="container name"):
        containers.pyxis("img", "bad name;rm", [], 1, 1, ["true"])


def test_apptainer_line() -> None:
    line = containers.apptainer("/images/pytorch.sif", [Mount(Path("/data"))], 1, 2, gpus=False,
                                argv=["python", "-m", "mlrepro.train"])
    assert line[:4] == ["srun", "--kill-on-bad-exit=1", "--ntasks=2", "--ntasks-per-node=2"]
    assert line[4:6] == ["apptainer", "exec"] and "--nv" not in line
    assert line[line.index("--bind") + 1] == "/data:/data:ro" and line[-4] == "/images/pytorch.sif"
    assert "--nv" in containers.apptainer("x.sif", [], 1, 1, gpus=True, argv=["true"])


def test_missing_pyxis_is_a_clear_error() -> None:
    """This cluster's srun (Debian's Slurm, no pyxis) has no --container-image."""
    require(shutil.which("srun") is not None, "srun is missing: .ci/slurm.sh installs Slurm")
    with pytest.raises(containers.PluginMissing, match=r"the pyxis plugin \(with enroot\) is not installed"):
        containers.require_pyxis()
