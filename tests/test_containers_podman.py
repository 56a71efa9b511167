"""Containers with a real engine: Podman's Docker-compatible API, as on CI (.ci/podman.sh starts it).

No registry: the base image is this machine's own Python environment imported as a rootfs
(tests/localbase.py), and the project's Dockerfile is built on it via BASE_IMAGE.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlrepro.containers import BaseImageMissing, BuildFailed, ImageMismatch, image_ref
from mlrepro.containers.build import build_image
from mlrepro.containers.jobs import image_record, lock, make_bundle
from mlrepro.datasets import generated
from mlrepro.engines import Mount, get_engine
from mlrepro.engines.client import connect
from mlrepro.gate.compliance import check
from tests.conftest import SYSTEM, require
from tests.localbase import ensure_base_image

pytestmark = pytest.mark.podman
REPO = Path(__file__).resolve().parent.parent
SOCKET_VAR = "MLREPRO_PODMAN_SOCKET"


@pytest.fixture(scope="session")
def socket() -> str:
    url = os.environ.get(SOCKET_VAR)
    require(bool(url), f"{SOCKET_VAR} is not set: start Podman's API with `eval \"$(.ci/podman.sh start)\"`")
    assert url is not None
    return url


@pytest.fixture(scope="session")
def client(socket: str) -> Any:
    return connect("podman", socket)


@pytest.fixture(scope="session")
def base(client: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The local stand-in for nvcr.io/nvidia/pytorch, imported once (reused when already there)."""
    return str(ensure_base_image(client, workdir=tmp_path_factory.mktemp("rootfs"))["ref"])


@pytest.fixture(scope="session")
def built(client: Any, base: str, socket: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("containers")
    record = out / "pytorch.json"
    image_record("pytorch", record, out / "pytorch.build.log", engine="podman", socket=socket, mode="build",
                 build_args={"BASE_IMAGE": base}, tag_prefix="localhost/mlrepro-test-", lock_path=out / "lock.json")
    return {"record": record, "lock": out / "lock.json", **json.loads(record.read_text())}


def test_build_record_names_image_base_and_inputs(built: dict[str, Any], base: str, client: Any) -> None:
    assert built["id"].startswith("sha256:") and built["builder"] == "podman"
    assert built["base_images"][0]["ref"] == base and built["base_images"][0]["id"].startswith("sha256:")
    assert built["build_args"] == {"BASE_IMAGE": base} and len(built["dockerfile_sha256"]) == 64
    assert image_ref(built["record"], locked=False) == built["tag"]
    # A second build of the same inputs comes from the cache: same id, every step after FROM cached.
    again = build_image(client, "pytorch", build_args={"BASE_IMAGE": base}, tag_prefix="localhost/mlrepro-test-",
                        log=built["record"].with_name("again.log"))
    assert again["id"] == built["id"] and again["cached_steps"] == again["steps"] - 1


def test_mini_benchmark_runs_in_the_container_and_passes_compliance(built: dict[str, Any], socket: str,
                                                                    tmp_path: Path) -> None:
    params = yaml.safe_load((REPO / "minis/resnet/defaults.yaml").read_text())
    params["data"].update(train_samples=128, eval_samples=64)
    params.update(max_epochs=1, target=0.0)
    data_dir, run_dir = tmp_path / "data", tmp_path / "run"
    generated.generate("resnet", data_dir, params, seed=1)
    engine = get_engine("podman", socket=socket)
    argv = ["python", "-m", "mlrepro.train", "--benchmark", "resnet", "--data-dir", str(data_dir),
            "--params", json.dumps(params), "--seed", "7", "--result", str(run_dir / "result.txt"),
            "--summary", str(run_dir / "run.json"), "--device", "cpu",
            "--submission", json.dumps({"org": "test", "platform": "ci"})]
    log = tmp_path / "run.log"
    code = engine.run(argv, image=image_ref(built["record"], locked=False),
                      mounts=[Mount(data_dir, read_only=True), Mount(run_dir, read_only=False)],
                      gpus=[], env={"OMP_NUM_THREADS": "1"}, log=log)
    assert code == 0, log.read_text()[-3000:]
    verdict = check(run_dir / "result.txt", "training", "2.0.0")
    assert verdict.valid, verdict.messages
    assert json.loads((run_dir / "run.json").read_text())["status"] == "success"


def test_data_mount_is_read_only_and_failures_keep_their_log(built: dict[str, Any], socket: str,
                                                            tmp_path: Path) -> None:
    engine = get_engine("podman", socket=socket)
    (tmp_path / "data").mkdir()
    log = tmp_path / "fail.log"
    code = engine.run(["python", "-c", f"print('before the crash'); open('{tmp_path}/data/x', 'w')"],
                      image=built["tag"], mounts=[Mount(tmp_path / "data")], gpus=[], env={}, log=log)
    assert code != 0
    assert "before the crash" in log.read_text() and "Read-only file system" in log.read_text()


def test_every_line_a_container_writes_reaches_its_log(built: dict[str, Any], socket: str, tmp_path: Path) -> None:
    """A run's MLLOG lines, written in 8 KB blocks (Python to a file or pipe) with stderr between them: Podman 4.3's
    log stream lost about 10 of 3,000 such lines in every run (a resnet run lost its epoch_stop line in CI)."""
    writer = ("import json, sys, time\n"
              "for i in range(3000):\n"
              "    print(':::MLLOG ' + json.dumps({'key': 'epoch_stop', 'i': i, 'pad': 'x' * (i % 97)}))\n"
              "    if i % 50 == 0: print('warning', i, file=sys.stderr)\n"
              "    if i % 200 == 0: time.sleep(0.01)\n")
    engine = get_engine("podman", socket=socket)
    for attempt in range(3):
        log = tmp_path / f"run {attempt}; odd 'name'.log"
        assert engine.run(["python", "-c", writer], image=built["tag"], mounts=[], gpus=[], env={}, log=log) == 0
        lines = log.read_text().splitlines()
        events = [json.loads(x.removeprefix(":::MLLOG ")) for x in lines if x.startswith(":::MLLOG ")]
        assert [e["i"] for e in events] == list(range(3000))
        assert sum(x.startswith("warning") for x in lines) == 60


def test_environment_is_taken_inside_the_container(built: dict[str, Any], socket: str) -> None:
    env = get_engine("podman", socket=socket).describe(built["tag"])
    assert env["image"]["id"] == built["id"] and env["engine"] == "podman"
    assert env["executable"].startswith("/usr/local/bin/python")  # the image's interpreter, not the venv's
    assert any(line.startswith("mlperf-logging==") for line in env["pip_freeze"])


def test_lock_pins_the_id_and_refuses_a_mismatch(built: dict[str, Any], socket: str, tmp_path: Path) -> None:
    lock_path = tmp_path / "images.lock.json"
    lock([built["record"]], lock_path)
    record = tmp_path / "pytorch.json"
    image_record("pytorch", record, tmp_path / "verify.log", engine="podman", socket=socket, mode="locked",
                 build_args={}, tag_prefix="", lock_path=lock_path)
    assert image_ref(record, locked=True) == built["id"]
    bad = json.loads(lock_path.read_text())
    bad["images"]["pytorch"]["id"] = "sha256:" + "0" * 64
    lock_path.write_text(json.dumps(bad))
    with pytest.raises(ImageMismatch, match=r"'pytorch' is locked to sha256:0000.*local .* is sha256:"):
        image_record("pytorch", record, tmp_path / "verify.log", engine="podman", socket=socket, mode="locked",
                     build_args={}, tag_prefix="", lock_path=lock_path)


def _project(tmp_path: Path, dockerfile: str) -> Path:
    (tmp_path / "containers" / "x").mkdir(parents=True)
    (tmp_path / "containers" / "x" / "Dockerfile").write_text(dockerfile)
    return tmp_path


def test_failing_dockerfile_shows_the_step_output(client: Any, base: str, tmp_path: Path) -> None:
    root = _project(tmp_path, f"FROM {base}\nRUN echo step-output-marker && exit 3\n")
    with pytest.raises(BuildFailed) as err:
        build_image(client, "x", log=tmp_path / "b.log", root=root, tag_prefix="localhost/mlrepro-test-")
    assert "step-output-marker" in str(err.value) and "exit 3" in str(err.value)


def test_missing_base_image_is_named(client: Any, tmp_path: Path) -> None:
    root = _project(tmp_path, "ARG BASE_IMAGE=localhost/mlrepro-no-such-base:1\nFROM ${BASE_IMAGE}\n")
    with pytest.raises(BaseImageMissing, match="localhost/mlrepro-no-such-base:1"):
        build_image(client, "x", log=tmp_path / "b.log", root=root)


def test_bundle_loads_back_with_the_locked_id(client: Any, socket: str, tmp_path: Path) -> None:
    """The auditor's path, on a tiny image: save, remove, load, run locked."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        payload = f"bundle test {time.time()}\n".encode()
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    answer = client.api.import_image_from_data(buf.getvalue(), repository="localhost/mlrepro-test-tiny")
    image_id = json.loads(answer.strip().splitlines()[-1])["id"]
    client.images.get(image_id).tag("localhost/mlrepro-test-tiny", "v1")
    record = {"image": "tiny", "tag": "localhost/mlrepro-test-tiny:v1", "id": image_id}
    (tmp_path / "tiny.json").write_text(json.dumps(record))
    lock_path = tmp_path / "images.lock.json"
    lock([tmp_path / "tiny.json"], lock_path)
    info_ = make_bundle(lock_path, tmp_path / "bundle", engine="podman", socket=socket)
    tar_path = tmp_path / "bundle" / "tiny.tar"
    assert info_["images"][0]["bytes"] == tar_path.stat().st_size > 0
    assert (tmp_path / "bundle" / "SHA256SUMS").read_text().split()[1] == "tiny.tar"
    client.images.remove(image_id, force=True)
    with pytest.raises(ImageMismatch, match="tiny"):
        image_record("tiny", tmp_path / "r.json", tmp_path / "r.log", engine="podman", socket=socket,
                     mode="locked", build_args={}, tag_prefix="", lock_path=lock_path)
    with tar_path.open("rb") as f:
        client.images.load(f.read())
    image_record("tiny", tmp_path / "r.json", tmp_path / "r.log", engine="podman", socket=socket,
                 mode="locked", build_args={}, tag_prefix="", lock_path=lock_path)
    assert image_ref(tmp_path / "r.json", locked=True) == image_id
    client.images.remove(image_id, force=True)


def test_default_dag_with_podman_builds_locks_runs_and_reports(base: str, socket: str, tmp_path: Path) -> None:
    """The real Snakefile with engine: podman: image built and locked, runs inside it, gate passed."""
    from tests.conftest import snakemake

    settings = {"engine": "podman", "engine_socket": socket, "build_args": {"BASE_IMAGE": base},
                "image_tag_prefix": "localhost/mlrepro-dag-", "only": ["resnet"],
                "inference": {"benchmarks": []}}  # LoadGen is tests/test_inference.py's
    config = tmp_path / "podman.yaml"
    config.write_text(yaml.safe_dump(settings))
    snakemake(tmp_path, "--configfile", str(config))

    results = tmp_path / "results"
    record = json.loads((results / "containers" / "pytorch.json").read_text())
    locked = json.loads((results / "containers" / "images.lock.json").read_text())
    assert record["id"] in json.dumps(locked)
    runs = [json.loads(p.read_text()) for p in sorted(results.glob(f"runs/{SYSTEM}/resnet/*/run.json"))]
    assert len(runs) == 5 and all(r["image"]["id"] == record["id"] and r["engine"] == "podman" for r in runs)
    assert all(json.loads(p.read_text())["valid"] for p in results.glob(f"compliance/{SYSTEM}/resnet/*.json"))
    assert json.loads((results / "package_check.json").read_text())["valid"]
    env = json.loads((results / "pipeline_info" / "environment.json").read_text())["engine"]
    assert env["pip_freeze"] and record["id"] in json.dumps(env)
    assert (results / "report.html").read_text().count(record["id"]) >= 5

    # A changed build arg, or an edited Dockerfile, rebuilds the image and re-runs what runs in it, not the data.
    config.write_text(yaml.safe_dump({**settings, "build_args": {"BASE_IMAGE": base, "PIP_NOTE": "x"}}))
    dry = snakemake(tmp_path, "--configfile", str(config), "--dry-run")
    text = dry.stdout + dry.stderr
    assert "rule container_image" in text and f"results/runs/{SYSTEM}/resnet/4/result.txt" in text
    assert "rule data:" not in text
    config.write_text(yaml.safe_dump(settings))
    dockerfile = REPO / "containers" / "pytorch" / "Dockerfile"
    original = dockerfile.read_bytes()
    try:
        dockerfile.write_bytes(original + b"# an edit\n")
        dry = snakemake(tmp_path, "--configfile", str(config), "--dry-run")
    finally:
        dockerfile.write_bytes(original)
    text = dry.stdout + dry.stderr
    assert "rule container_image" in text and f"results/runs/{SYSTEM}/resnet/0/result.txt" in text
