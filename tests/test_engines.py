"""Engines and container records without a container engine: the one-line errors, parsing, the lock."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from mlrepro.containers import ImageMismatch, image_ref
from mlrepro.containers.build import BuildFailed, _stream
from mlrepro.containers.context import base_images, context_files
from mlrepro.containers.lock import write_lock
from mlrepro.engines import EngineUnavailable, get_engine

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("tool", ["apptainer", "enroot"])
def test_missing_tool_is_one_line_naming_it(tool: str) -> None:
    if shutil.which(tool):
        pytest.skip(f"{tool} is installed here")
    with pytest.raises(EngineUnavailable) as err:
        get_engine(tool)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{tool} is not installed") and "install" in message


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_missing_socket_is_one_line(engine: str, tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable) as err:
        get_engine(engine, socket=f"unix://{tmp_path}/none.sock")
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{engine}:") and "none.sock" in message


def test_native_ignores_engine_options(tmp_path: Path) -> None:
    """A socket (a container engine's option) changes nothing: the run is this interpreter's child, on the host."""
    engine = get_engine("native", socket=f"unix://{tmp_path}/none.sock")
    log = tmp_path / "run.log"
    script = ("import json, os, sys; print(json.dumps([sys.executable, os.getcwd(), os.environ['MARK'], "
              "os.environ['CUDA_VISIBLE_DEVICES']]))")
    code = engine.run(["python", "-c", script], image="ignored:1", mounts=[], gpus=[], env={"MARK": "m"}, log=log,
                      workdir=str(tmp_path))
    assert code == 0, log.read_text()
    assert json.loads(log.read_text()) == [sys.executable, str(tmp_path), "m", ""]  # no GPU for a CPU run
    assert not (tmp_path / "none.sock").exists()
    described = engine.describe("ignored:1")
    assert described["engine"] == "native" and described["image"] is None


def test_base_image_follows_build_args(tmp_path: Path) -> None:
    df = tmp_path / "Dockerfile"
    df.write_text("# c\nARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.10-py3\nARG X\nFROM ${BASE_IMAGE} AS build\n"
                  "RUN true\nFROM build\nFROM scratch\n")
    assert base_images(df, {}) == ["nvcr.io/nvidia/pytorch:25.10-py3"]
    assert base_images(df, {"BASE_IMAGE": "localhost/base:1"}) == ["localhost/base:1"]
    assert base_images(REPO / "containers/pytorch/Dockerfile", {})[0].startswith("nvcr.io/nvidia/pytorch:")


def test_context_is_the_package_and_the_image_folder_only() -> None:
    files = {p.as_posix() for p in context_files("pytorch", REPO)}
    assert {"pyproject.toml", "mlrepro/training/loop.py", "containers/pytorch/Dockerfile",
            "containers/pytorch/requirements.txt", "minis/resnet/model.py"} <= files
    assert not any(f.startswith((".venv", ".git/", "results/", "tests/")) for f in files)


def test_container_requirements_pin_what_the_repository_pins() -> None:
    def pins(path: Path) -> dict[str, str]:
        return dict(line.split("==", 1) for line in path.read_text().splitlines()
                    if "==" in line and not line.startswith("#"))

    repo, image = pins(REPO / "requirements.txt"), pins(REPO / "containers/pytorch/requirements.txt")
    assert image and all(repo[name] == version for name, version in image.items())
    assert "torch" not in image and "numpy" not in image  # NGC's own builds stay


def test_failing_step_output_is_in_the_error(tmp_path: Path) -> None:
    chunks = [{"stream": "STEP 1/2: FROM base\n"}, {"stream": "STEP 2/2: RUN make\n"},
              {"stream": "compiling...\nmake: *** [all] Error 2\n"},
              {"error": "building at STEP \"RUN make\": exit status 2"}]
    with pytest.raises(BuildFailed) as err:
        _stream(iter(chunks), tmp_path / "build.log")
    assert "RUN make" in str(err.value) and "make: *** [all] Error 2" in str(err.value)
    assert "Error 2" in (tmp_path / "build.log").read_text()


def _record(tmp_path: Path, lock: Path | None) -> Path:
    record = {"image": "pytorch", "tag": "localhost/mlrepro-pytorch:abc", "id": "sha256:" + "1" * 64,
              "engine": "podman", "socket": f"unix://{tmp_path}/none.sock"}
    if lock:
        record["lock"] = str(lock)
    path = tmp_path / "pytorch.json"
    path.write_text(json.dumps(record))
    return path


def test_unlocked_runs_use_the_tag(tmp_path: Path) -> None:
    assert image_ref(_record(tmp_path, None), locked=False) == "localhost/mlrepro-pytorch:abc"


def test_locked_run_refuses_a_record_the_lock_disagrees_with(tmp_path: Path) -> None:
    lock = tmp_path / "images.lock.json"
    record = _record(tmp_path, lock)
    write_lock(lock, [{**json.loads(record.read_text()), "id": "sha256:" + "2" * 64}])
    with pytest.raises(ImageMismatch, match=r"pytorch.*sha256:2222"):
        image_ref(record, locked=True)


def test_locked_run_without_lock_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ImageMismatch, match="no lock file"):
        image_ref(_record(tmp_path, tmp_path / "missing.lock.json"), locked=True)
