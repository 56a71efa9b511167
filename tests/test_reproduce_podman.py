"""A hostile package's own code during a real reproduction: in a Podman container (engine: podman) it cannot
write into the package, into $HOME or anywhere else on the host; natively (engine: native) it can, and the change
to the package is the run's error, named in its report and its exit status."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SYSTEM as PIPELINE_SYSTEM
from tests.conftest import snakemake, write_mllog
from tests.test_containers_podman import base, client, socket  # noqa: F401  (session fixtures)
from tests.test_implementations import OUTSIDE, _points
from tests.test_reproduce import _snapshot

pytestmark = pytest.mark.integration
SYSTEM = "sys1"


def _hostile_package(root: Path, outside: Path, config_extra: str = "") -> tuple[Path, list[Path]]:
    """A vendor-style package (tests/fixtures/outside_impl, one submitted result) whose run_and_time.sh and config
    file try to write into the package (a file of it, by its absolute path, and a new one), into $HOME, into a
    folder outside everything, and into the folder they run from; each attempt's outcome is printed. Returns the
    organisation folder and the host files that must not appear (or, for the package's file, change)."""
    org = root / "pkg" / "org"
    write_mllog(org / "results" / SYSTEM / "resnet" / "result_0.txt", "resnet", 1_000_000, 1.0, seed=7)
    (org / "systems").mkdir(parents=True)
    (org / "systems" / f"{SYSTEM}.json").write_text(json.dumps({"division": "open", "accelerators_per_node": 0}))
    impl = Path(shutil.copytree(OUTSIDE, org / "benchmarks" / "resnet" / "implementations" / "hostile"))
    home = Path(os.environ["HOME"])
    targets = [impl / "train.py", org / "written_by_package", home / "mlrepro_home_canary", outside / "canary"]
    attempts = "".join(f'if (echo hostile >> "{t}") 2>/dev/null; then echo "WROTE {t}"; else echo "REFUSED {t}"; fi\n'
                       for t in [*targets, Path("./written_in_place")])
    (impl / f"config_{SYSTEM}.sh").write_text((OUTSIDE / "config_CPU.sh").read_text() + attempts + config_extra)
    script = (OUTSIDE / "run_and_time.sh").read_text()
    (impl / "run_and_time.sh").write_text(script.replace("set -euo pipefail\n", "set -euo pipefail\n" + attempts))
    return org, targets


def _reproduce(work: Path, org: Path, data: Path, engine: dict[str, Any]) -> Any:
    cfg = {"reproduce": str(org), "system": SYSTEM, "only": ["resnet"], "runs": 1, "telemetry": {"enabled": False},
           "benchmarks": {"resnet": {"data_dir": str(data)}}, **engine}
    work.mkdir(parents=True)
    (work / "reproduce.yaml").write_text(yaml.safe_dump(cfg))
    return snakemake(work, "--configfile", str(work / "reproduce.yaml"), check=False)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A $HOME of the test's own, for the native run to write into."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    return folder


@pytest.mark.podman
def test_hostile_package_code_in_podman_cannot_write_outside_its_outputs(
        base: str, socket: str, home: Path, tmp_path: Path) -> None:  # noqa: F811
    outside = tmp_path / "outside"
    outside.mkdir()
    org, targets = _hostile_package(tmp_path, outside)
    before = _snapshot(org)
    data = _points(tmp_path / "data")
    work = tmp_path / "work"
    out = _reproduce(work, org, data, {"engine": "podman", "engine_socket": socket,
                                       "build_args": {"FROM_IMAGE_NAME": base},
                                       "image_tag_prefix": "localhost/mlrepro-test-"})
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-6000:]
    assert "will run in podman containers built from its Dockerfiles" in text and "natively" not in text
    repro = work / "reproduction"
    train_log = (repro / "runs" / SYSTEM / "resnet" / "0" / "train.log").read_text()
    staged = (repro / "implementation" / "resnet").resolve()
    # every write the run attempted beyond its outputs was refused: the package, $HOME, outside, its own code
    for target in [*targets, Path("./written_in_place")]:
        assert f"REFUSED {target}" in train_log, (target, train_log[-3000:])
    assert "WROTE" not in train_log
    assert _snapshot(org) == before
    assert not (home / "mlrepro_home_canary").exists() and not (outside / "canary").exists()
    assert not (staged / "written_in_place").exists()
    doc = json.loads((repro / "reproduction.json").read_text())
    assert doc["package_changes"] == []
    run = json.loads((repro / "runs" / SYSTEM / "resnet" / "0" / "run.json").read_text())
    record = json.loads((repro / "containers" / "resnet.json").read_text())
    assert run["engine"] == "podman" and run["image"]["id"] == record["id"] and run["status"] == "success"
    assert run["implementation"]["folder"] == str(staged)
    assert record["base_images"][0]["ref"] == base and record["dockerfile"] == "Dockerfile"
    # the config file was sourced in the image too (its attempts refused there), and its values reached the run
    launch = json.loads((repro / "runs" / SYSTEM / "resnet" / "launch.json").read_text())
    assert launch["env"]["BATCHSIZE"] == "32" and launch["code"] == str(staged)


def test_hostile_package_code_run_natively_is_an_error_naming_the_change(home: Path, tmp_path: Path) -> None:
    """Natively the package's code runs as the user: a warning says so before anything runs, the run writes where
    it likes, and the package's changed bytes are the reproduction's error (exit status, report, message)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    org, _ = _hostile_package(tmp_path, outside)
    data = _points(tmp_path / "data")
    work = tmp_path / "work"
    out = _reproduce(work, org, data, {})
    text = out.stdout + out.stderr
    assert "will run natively as you, with your rights" in text
    assert out.returncode != 0, text[-6000:]
    changes = ["written_by_package: added", "benchmarks/resnet/implementations/hostile/train.py: changed"]
    doc = json.loads((work / "reproduction" / "reproduction.json").read_text())
    assert doc["package_changes"] == changes
    assert doc["verdict"] == "not comparable"
    # the report's log, on the terminal (a shown job's: mlrepro/jobs.py SHOWN), then the run's error, and the report
    listed = "; ".join(changes)
    assert f"error: the package {org} changed while it was reproduced: {listed}" in out.stdout, out.stdout[-6000:]
    assert f"the package {org} changed while it was reproduced ({listed})" in out.stderr, out.stderr[-6000:]
    assert "the package changed while it was reproduced" in (work / "reproduction" / "reproduction.html").read_text()
    # nothing stops native code from writing outside: what the warning says
    assert (home / "mlrepro_home_canary").exists() and (outside / "canary").exists()


@pytest.mark.podman
def test_our_package_reproduces_in_podman(tiny_package: Path, base: str, socket: str,  # noqa: F811
                                          tmp_path: Path) -> None:
    """This pipeline's own package under engine: podman: the image from the package's containers/pytorch/Dockerfile
    (its implementation folder the context), the package's own data generator and training code in it from the
    staged copy; the same seeds, metrics and dataset as submitted, and the package unchanged."""
    org = tiny_package / "submission" / "mlrepro"
    before = _snapshot(org)
    work = tmp_path / "work"
    work.mkdir()
    (work / "reproduce.yaml").write_text(yaml.safe_dump({
        "reproduce": str(org), "only": ["resnet"], "runs": 1, "telemetry": {"enabled": False}, "engine": "podman",
        "engine_socket": socket, "build_args": {"BASE_IMAGE": base}, "image_tag_prefix": "localhost/mlrepro-test-"}))
    out = snakemake(work, "--configfile", str(work / "reproduce.yaml"), check=False)
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    repro = work / "reproduction"
    doc = json.loads((repro / "reproduction.json").read_text())
    assert doc["verdict"] == "reproduced", doc["benchmarks"][0]["reasons"]
    bench = doc["benchmarks"][0]
    assert bench["dataset"]["identical"] and bench["runs"][0]["metrics_identical"]
    record = json.loads((repro / "containers" / "resnet.json").read_text())
    assert record["dockerfile"] == "containers/pytorch/Dockerfile" and record["build_args"] == {"BASE_IMAGE": base}
    run = json.loads((repro / "runs" / PIPELINE_SYSTEM / "resnet" / "0" / "run.json").read_text())  # the package's
    assert run["engine"] == "podman" and run["image"]["id"] == record["id"]
    assert _snapshot(org) == before and doc["package_changes"] == []


def test_a_result_name_that_is_not_utf8_gets_a_verdict(home: Path, tmp_path: Path) -> None:
    """A result named with bytes that are not UTF-8, added after packaging: Snakemake used to stop on it
    (UnicodeEncodeError, recording its inputs); now the package check names it, escaped, before anything runs."""
    from mlrepro.package import provenance

    outside = tmp_path / "outside"
    outside.mkdir()
    org, _ = _hostile_package(tmp_path, outside)
    provenance.write(org, {"files": provenance.package_files(org)})
    results = org / "results" / SYSTEM / "resnet"
    shutil.copy(results / "result_0.txt", results / os.fsdecode(b"result_\xff.txt"))
    out = _reproduce(tmp_path / "work", org, _points(tmp_path / "data"), {})
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "UnicodeEncodeError" not in text
    assert f"results/{SYSTEM}/resnet/result_\\udcff.txt is in the package but not in the manifest (added)" in text
    assert not (tmp_path / "work" / "reproduction" / "implementation").exists()
    assert not (home / "mlrepro_home_canary").exists()


@pytest.mark.podman
def test_a_config_file_cannot_make_the_host_read_its_files(base: str, socket: str, home: Path,  # noqa: F811
                                                           tmp_path: Path) -> None:
    """Sourced in the image, a config file puts a link to a host file (in env -0's form, as if written for it) where
    its variables are then written: the host reads regular files of that folder only, so the launch step
    stops, naming the link, and nothing of the host file reaches the outputs."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = tmp_path / "host_secret"
    secret.write_bytes(b"DGXNNODES=1\0DGXNGPU=0\0MLREPRO_LEAKED=host-secret-4711\0")
    # (python: the test's image has no coreutils)
    link = f"python3 -c 'import os; os.symlink(\"{secret}\", \"/capture/env\")'\n"
    org, _ = _hostile_package(tmp_path, outside, link)
    work = tmp_path / "work"
    out = _reproduce(work, org, _points(tmp_path / "data"), {
        "engine": "podman", "engine_socket": socket, "build_args": {"FROM_IMAGE_NAME": base},
        "image_tag_prefix": "localhost/mlrepro-test-"})
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "sourced in its image, it left" in text and "a symlink" in text, text[-4000:]
    assert not (work / "reproduction" / "runs" / SYSTEM / "resnet" / "launch.json").exists()
    assert not any("host-secret-4711" in p.read_text(errors="replace")
                   for p in (work / "reproduction").rglob("*") if p.is_file())
