"""Implementation folders under a real engine (Podman's Docker-compatible API, as on CI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlrepro.containers import BaseImageMissing
from mlrepro.containers.context import context_digest, folder_files
from mlrepro.containers.jobs import image_record
from mlrepro.telemetry.store import read_samples
from tests.conftest import SYSTEM, snakemake
from tests.test_containers_podman import base, client, socket  # noqa: F401  (session fixtures)
from tests.test_implementations import OUTSIDE, _points

pytestmark = pytest.mark.podman


def test_nvidia_build_fails_naming_the_missing_base_image(client: Any, socket: str,  # noqa: F811
                                                          nvidia_benchmarks: Path, tmp_path: Path) -> None:
    folder = nvidia_benchmarks / "resnet" / "implementations" / "mxnet"
    log = tmp_path / "build.log"
    with pytest.raises(BaseImageMissing) as err:
        image_record("resnet-mxnet", tmp_path / "r.json", log, engine="podman", socket=socket, mode="build",
                     build_args={}, tag_prefix="localhost/mlrepro-test-", lock_path=tmp_path / "lock.json",
                     folder=folder)
    message = str(err.value)
    assert "\n" not in message and "nvcr.io/nvidia/mxnet:21.09-py3" in message
    assert message in log.read_text() and not (tmp_path / "r.json").exists()


@pytest.mark.integration
def test_outside_implementation_runs_under_podman(base: str, socket: str, tmp_path: Path) -> None:  # noqa: F811
    _points(tmp_path / "data")
    cfg = {"engine": "podman", "engine_socket": socket, "build_args": {"FROM_IMAGE_NAME": base},
           "image_tag_prefix": "localhost/mlrepro-test-", "allow_fewer_runs": True, "telemetry": {"hz": 10},
           "only": ["resnet"], "benchmarks": {"resnet": {
               "implementation": str(OUTSIDE), "system_config": "config_CPU.sh", "data_dir": "data", "runs": 1}}}
    (tmp_path / "podman.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(tmp_path, f"results/runs/{SYSTEM}/resnet/0/run.json", f"results/compliance/{SYSTEM}/resnet/0.json",
              "--configfile", str(tmp_path / "podman.yaml"))
    results = tmp_path / "results"
    record = json.loads((results / "containers" / "resnet-outside_impl.json").read_text())
    assert record["dockerfile"] == "Dockerfile" and record["base_images"][0]["ref"] == base
    assert record["context_sha256"] == context_digest("x", OUTSIDE, folder_files(OUTSIDE))
    run = json.loads((results / f"runs/{SYSTEM}/resnet/0/run.json").read_text())
    assert run["engine"] == "podman" and run["image"]["id"] == record["id"] and run["status"] == "success"
    assert json.loads((results / f"compliance/{SYSTEM}/resnet/0.json").read_text())["valid"]
    assert "/workspace/outside/train.py" in (results / f"runs/{SYSTEM}/resnet/0/result.txt").read_text()
    # the container's processes are measured, not only the driver's (which imports no torch)
    assert (results / f"runs/{SYSTEM}/resnet/0/telemetry/container.pids").read_text().strip().isdigit()
    samples, _ = read_samples(results / f"runs/{SYSTEM}/resnet/0/telemetry")
    # driver and sampler, plus the container's bash and python (torch): the latter alone are ~300 MB
    assert max((v for v in samples.column("proc_count") if v is not None), default=0) >= 4
    assert max((v for v in samples.column("proc_rss_bytes") if v is not None), default=0) > 300 * 2**20
