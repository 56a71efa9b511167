"""The worked example of docs/vendor-launch.md, as a submitter copies it: `snakemake launch_preview` writes
<outdir>/launch_preview.json with the steps of NVIDIA's v4.1 RetinaNet run.sub and the node-hours of both systems."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, snakemake

ARCHIVE = REPO.parent / "shared" / "data" / "mlperf_training_nvidia_implementations_v4.1.tar.xz"


@pytest.mark.integration
@pytest.mark.vendor
def test_the_docs_example_previews_its_launch(tmp_path: Path) -> None:
    if not ARCHIVE.is_file():
        pytest.skip(f"{ARCHIVE} is not here (../shared/data)")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_path / "lustre", filter="data")
    text = (REPO / "docs" / "vendor-launch.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert example, "docs/vendor-launch.md: no yaml example"
    # the example's shared file system is this test's folder
    config_text = example.group(1).replace("/lustre/$USER/", f"{tmp_path}/lustre/").replace(
        "/lustre/datasets/", f"{tmp_path}/datasets/")
    config = yaml.safe_load(config_text)
    for path in [config["benchmarks"]["ssd"]["data_dir"], config["benchmarks"]["ssd"]["env"]["BACKBONE_DIR"]]:
        Path(path).mkdir(parents=True)
    # first as the docs' "What to set" starts: nothing but image and data_dir; the capture job refuses, naming the
    # variable, the line of run.sub that reads it, the mount it feeds and the key to set
    backbone = config["benchmarks"]["ssd"].pop("env")
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(config))
    refused = snakemake(tmp_path, "--configfile", str(tmp_path / "bare.yaml"), "--", "launch_preview", check=False)
    said = refused.stdout + refused.stderr
    n1_run_sub = f"{tmp_path}/lustre/NVIDIA/benchmarks/ssd/implementations/eos_ngc24.09_pytorch/run.sub"
    assert refused.returncode != 0 and f"benchmarks.ssd.env.BACKBONE_DIR: {n1_run_sub}:147 reads" in said, said[-3000:]
    assert "the source of the container mount /root/.cache/torch" in said and "MLPERF_CLUSTER_NAME" not in said
    config["benchmarks"]["ssd"]["env"] = backbone
    (tmp_path / "submission.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(tmp_path, "--configfile", str(tmp_path / "submission.yaml"), "--", "launch_preview")
    out = Path(config["outdir"]) / "launch_preview.json"
    entries = json.loads(out.read_text())
    assert [(e["system"], e["benchmark"]) for e in entries] == [("dgxh100_n1", "ssd"), ("dgxh100_n8", "ssd")]
    n1, n8 = entries
    assert n8["allocation"]["nodes"] == 8 and n8["allocation"]["gpus_per_node"] == 8
    assert n8["node_hours"] == pytest.approx(5 * 8 * n8["allocation"]["time_minutes"] / 60, abs=1e-3)
    sbatch = n8["allocation"]["sbatch"]
    assert "--exclusive" in sbatch and not any(w.startswith("--mem") for w in sbatch)  # the plugin takes no --mem
    training = n8["summary"]["training"]
    assert (training["ntasks"], training["ntasks_per_node"]) == ("64", "8")
    assert training["mounts"] == ["/datasets/open-images-v6", "/results", "/root/.cache/torch"]
    assert training["command"] == ["slurm2pytorch", "./run_and_time.sh"]
    assert n1["summary"]["cache_clear"] and n1["summary"]["cache_clear_logged"]
    assert all("error" not in e and "demands" not in e for e in entries)
    torch = next(m for m in n8["mounts"] if m["destination"] == "/root/.cache/torch")
    assert torch["variable"] == "BACKBONE_DIR" and torch["exists_here"] and "by hand" in torch["fill"]
    assert {c["kind"] for c in n8["commands"]} >= {"step", "query", "local"}
    assert "node-hours" in proc.stdout + proc.stderr
