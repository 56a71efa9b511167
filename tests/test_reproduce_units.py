"""Reproduce mode's parts without a pipeline run: the plan on a hostile package (clear errors, nothing run, its config
file neither sourced nor read), the staging, the capture of the staged config file and the launch spec made from it (the
pipeline's capture job, with the reproduction as the run stage's plan), the package checked after."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mlrepro.reproduce import plan, stage, verify
from mlrepro.reproduce.errors import ReproduceError
from mlrepro.reproduce.run_stage import ReproducedRuns
from mlrepro.runs import capture, capture_job
from mlrepro.runs.launch_spec import LaunchSpec
from tests.conftest import require, write_mllog

SYSTEM = "sys1"
DEEP = 100_000


def _package(root: Path, config_text: str = "export DGXNNODES=1\nexport DGXNGPU=0\nexport WALLTIME=5\n",
             runs: int = 2) -> Path:
    """A vendor-style organisation folder: one system, resnet results, an implementation folder."""
    org = root / "org"
    for i in range(runs):
        write_mllog(org / "results" / SYSTEM / "resnet" / f"result_{i}.txt", "resnet", 1_000_000, 1.0, seed=7 + i)
    (org / "systems").mkdir(parents=True)
    (org / "systems" / f"{SYSTEM}.json").write_text(json.dumps({"division": "open", "accelerators_per_node": 0}))
    impl = org / "benchmarks" / "resnet" / "implementations" / "impl"
    impl.mkdir(parents=True)
    (impl / "run_and_time.sh").write_text("#!/bin/bash\necho run\n")
    (impl / f"config_{SYSTEM}.sh").write_text(config_text)
    (root / "data").mkdir()
    return org


def _plan(org: Path) -> plan.Plan:
    return plan.plan(org, system=SYSTEM, only=[], runs=None, overrides={}, default_data_seed=1,
                     data_dirs={"resnet": str(org.parent / "data")})


def test_the_plan_runs_nothing_of_the_config_file(tmp_path: Path) -> None:
    """Planning (while the DAG is built) never sources the package's config file: its job shape comes from the
    capture job, from the staged copy."""
    canary = tmp_path / "CANARY"
    org = _package(tmp_path, f"$(touch {canary})\n`touch {canary}`\nexport DGXNNODES=2\n"
                             f"export DGXNGPU=$(touch {canary}; echo 8)\n")
    p = _plan(org)
    assert p.benchmarks["resnet"].config_file == f"config_{SYSTEM}.sh" and not canary.exists()
    runs = _runs(org, tmp_path / "reproduction")
    assert not canary.exists()  # staged, not sourced
    _captured(runs)  # the job: bash runs it
    assert canary.exists() and capture.read(runs.capture_file(SYSTEM, "resnet")).env["DGXNGPU"] == "8"


def test_hostile_package_files_get_clear_errors(tmp_path: Path) -> None:
    org = _package(tmp_path)
    result = org / "results" / SYSTEM / "resnet" / "result_1.txt"
    result.unlink()
    result.symlink_to("/dev/zero")
    with pytest.raises(ReproduceError, match=r"result_1\.txt: a symlink out of .* \(-> /dev/zero\)"):
        _plan(org)
    result.unlink()
    os.mkfifo(result)
    with pytest.raises(ReproduceError, match=r"result_1\.txt: not a regular file \(a FIFO\)"):
        _plan(org)
    result.unlink()
    result.write_text(':::MLLOG {"key": "seed", "value": ' + "[" * DEEP + "]" * DEEP + "}\n")
    with pytest.raises(ReproduceError, match=r"result_1\.txt, line 1: JSON nested too deep"):
        _plan(org)
    write_mllog(result, "resnet", 1_000_000, 1.0, seed=8)
    manifest = org / "provenance.json"
    with manifest.open("wb") as f:
        f.truncate(3 << 30)
    with pytest.raises(ReproduceError, match=r"provenance\.json: 3221225472 bytes, over the limit"):
        _plan(org)
    manifest.write_text("[" * DEEP + "]" * DEEP)
    with pytest.raises(ReproduceError, match=r"provenance\.json: JSON nested too deep"):
        _plan(org)
    with pytest.raises(ReproduceError, match=r"provenance\.json: JSON nested too deep"):
        verify.before(org)
    manifest.unlink()
    assert _plan(org).benchmarks["resnet"].seeds == [7, 8]


def test_package_with_unsafe_entries_is_refused_before_anything_runs(tmp_path: Path) -> None:
    org = _package(tmp_path)
    os.mkfifo(org / "systems" / "fifo")
    (org / "results" / "etc").symlink_to("/etc")
    with pytest.raises(ReproduceError, match=r"results/etc \(a symlink out of org/, -> /etc\); "
                       r"systems/fifo \(not a regular file\)\. Nothing was run"):
        verify.before(org)


def test_package_changes_after_the_check_are_named(tmp_path: Path) -> None:
    org = _package(tmp_path)
    record = verify.before(org)
    assert record["manifest"]["present"] is False and verify.after(org, record) == []
    (org / "results" / SYSTEM / "resnet" / "result_0.txt").write_text("edited\n")
    (org / "benchmarks" / "resnet" / "implementations" / "impl" / "out.log").write_text("a run wrote here\n")
    assert verify.after(org, record) == ["benchmarks/resnet/implementations/impl/out.log: added",
                                         f"results/{SYSTEM}/resnet/result_0.txt: changed"]


def test_stage_copies_files_and_inner_links_and_refuses_the_rest(tmp_path: Path) -> None:
    impl = _package(tmp_path) / "benchmarks" / "resnet" / "implementations" / "impl"
    (impl / "sub").mkdir()
    (impl / "sub" / "train.py").write_text("print(1)\n")
    (impl / "train.py").symlink_to("sub/train.py")
    (impl / "__pycache__").mkdir()
    (impl / "__pycache__" / "x.pyc").write_bytes(b"\0")
    stage.stage(impl, tmp_path / "staged")
    staged = tmp_path / "staged"
    assert (staged / "sub" / "train.py").read_text() == "print(1)\n"
    assert os.readlink(staged / "train.py") == "sub/train.py"
    assert not (staged / "__pycache__").exists() and (staged / "run_and_time.sh").is_file()
    (impl / "zero").symlink_to("/dev/zero")
    os.mkfifo(impl / "sub" / "pipe")
    with pytest.raises(ReproduceError, match=r"zero \(a symlink out of impl/, -> /dev/zero\); "
                       r"sub/pipe \(not a regular file\)"):
        stage.stage(impl, tmp_path / "staged2")
    assert not (tmp_path / "staged2").exists()


def _runs(org: Path, root: Path) -> ReproducedRuns:
    """The reproduction as the run stage's rules read it, its implementation staged (reproduce_stage's job)."""
    runs = ReproducedRuns.for_reproduction(_plan(org), {"engine": "native", "threads_per_run": 1, "device": "cpu",
                                                        "images": "locked"}, root)
    stage.stage(Path(runs.benchmarks["resnet"].implementation), runs.staged("resnet"))
    return runs


def _captured(runs: ReproducedRuns) -> LaunchSpec:
    """The pipeline's capture job (rules/runs.smk capture) on the staged copy, then the launch spec the launch and run
    jobs are given."""
    capture_job.capture(runs.capture_source("resnet"), runs.capture_file(SYSTEM, "resnet"),
                        runs.capture_checks("resnet"), runs.capture_preflight("resnet"), runs.capture_runs("resnet"))
    return LaunchSpec.from_dict(runs.launch_params(SYSTEM, "resnet"), "test")


def test_launch_file_takes_the_staged_configs_capture_and_its_shape(tmp_path: Path) -> None:
    org = _package(tmp_path, "export DGXNNODES=1\nexport DGXNGPU=$(echo 2)\nexport LR=0.5\n")
    runs = _runs(org, tmp_path / "reproduction")
    assert runs.config["images"] == "build"  # a reproduction builds its own images: never the lock's
    with pytest.raises(FileNotFoundError):  # <TBD> while the DAG is built, until the capture job has run
        runs.launch_params(SYSTEM, "resnet")
    spec = _captured(runs)
    staged = runs.staged("resnet").resolve()
    assert spec.env["LR"] == "0.5" and spec.folder == str(staged) and (spec.nodes, spec.gpus) == (1, 2)
    assert spec.data_dir == str((tmp_path / "data").resolve()) and runs.scheduled_gpus(SYSTEM, "resnet") == 2
    assert runs.run_seed("resnet", 1) == 8 and runs.all_runs(runs.out.result) == [
        tmp_path / "reproduction" / "runs" / SYSTEM / "resnet" / str(i) / "result.txt" for i in range(2)]
    # what the rules track is known before the capture (a stand-in's spec), and is not the captured one
    assert runs.rerun.basis(lambda p: p.launch_params(SYSTEM, "resnet")) != runs.rerun.basis(lambda p: spec.to_dict())
    assert plan.from_json(json.loads(json.dumps(plan.to_json(_plan(org))))) == _plan(org)
    runs2 = _runs(_package(tmp_path / "b", "export DGXNNODES=0\nexport DGXNGPU=0\n"), tmp_path / "b" / "reproduction")
    with pytest.raises(capture.CaptureError, match=r"benchmarks\.resnet\.system_config: .*config_sys1\.sh: "
                       r"DGXNNODES=0, DGXNGPU=0: a run needs at least one node \(DGXNNODES >= 1\)"):
        _captured(runs2)
    assert not runs2.capture_file(SYSTEM, "resnet").exists()


def test_package_is_verified_against_its_manifest_and_the_published_hash(tmp_path: Path) -> None:
    from mlrepro.package import provenance

    org = _package(tmp_path)
    digest = provenance.write(org, {"format": provenance.FORMAT, "files": provenance.package_files(org)})
    assert verify.before(org, digest)["manifest"]["verified"]
    with pytest.raises(ReproduceError, match=r"provenance\.json: provenance\.json has sha256 .* published"):
        verify.before(org, "0" * 64)
    result = org / "results" / SYSTEM / "resnet" / "result_1.txt"
    result.write_text(result.read_text() + "\n")
    with pytest.raises(ReproduceError, match=rf"results/{SYSTEM}/resnet/result_1\.txt: the result file "
                       rf"results/{SYSTEM}/resnet/result_1\.txt changed.*Nothing was run"):
        verify.before(org)
    (org / "provenance.json").unlink()
    (org / "provenance.sha256").unlink()
    with pytest.raises(ReproduceError,
                       match=r"published the sha256 .* of its provenance\.json, but the package has none"):
        verify.before(org, digest)


def test_package_folders_that_are_symlinks_are_refused(tmp_path: Path) -> None:
    org = _package(tmp_path)
    (org / "systems").rename(tmp_path / "systems")
    (org / "systems").symlink_to(tmp_path / "systems")
    with pytest.raises(ReproduceError, match=r"org/systems is a symlink \(-> .*\), not a folder of the package"):
        _plan(org)


def test_a_container_engine_needs_the_implementations_dockerfile_before_anything_runs(tmp_path: Path) -> None:
    """engine: podman runs the package's code in the image its Dockerfile builds: without one (or with a link in
    its place) the plan stops, naming the folder and the native alternative; natively none is needed."""
    org = _package(tmp_path)
    impl = org / "benchmarks" / "resnet" / "implementations" / "impl"
    args = {"system": SYSTEM, "only": [], "runs": None, "overrides": {}, "default_data_seed": 1,
            "data_dirs": {"resnet": str(tmp_path / "data")}}
    assert plan.plan(org, **args).benchmarks["resnet"].dockerfile == ""
    (impl / "Dockerfile").symlink_to("/etc/hostname")
    with pytest.raises(ReproduceError, match=rf"resnet: engine podman runs the package's code in the image its "
                       rf"Dockerfile builds, and {impl} has none .*reproduce with engine=native"):
        plan.plan(org, **args, engine="podman")
    (impl / "Dockerfile").unlink()
    (impl / "Dockerfile").write_text("FROM scratch\n")
    assert plan.plan(org, **args, engine="podman").benchmarks["resnet"].dockerfile == "Dockerfile"


def test_contained_launch_file_mounts_the_staged_copy(tmp_path: Path) -> None:
    """The launch file names the staged copy as the run's code: a container engine mounts it read-only and runs
    the staged run_and_time.sh there (mlrepro.runs.driver), never the package's. What the config file prints does
    not run into its variables."""
    org = _package(tmp_path, "echo printed by the config\nexport DGXNNODES=1\nexport DGXNGPU=0\n")
    runs = _runs(org, tmp_path / "reproduction")
    staged = runs.staged("resnet").resolve()
    spec = _captured(runs)
    assert spec.code == str(staged) and spec.folder == str(staged)
    assert str(org) not in spec.to_json()
    assert spec.env == {"DGXNNODES": "1", "DGXNGPU": "0"}


def test_a_file_over_the_size_limit_is_named_not_hashed(tmp_path: Path) -> None:
    """A sparse 3 GB file in a package without a manifest: the reproduction's check names it before anything runs,
    without reading it (hashing it would take as long as reading 3 GB, a terabyte hours)."""
    org = _package(tmp_path)
    with (org / "benchmarks" / "resnet" / "implementations" / "impl" / "weights.bin").open("wb") as f:
        f.truncate(3 << 30)
    with pytest.raises(ReproduceError, match=r"files over the size limit of \d+ bytes, which are not hashed: "
                       r"benchmarks/resnet/implementations/impl/weights\.bin \(3221225472 bytes\)\. Nothing was run"):
        verify.before(org)


def test_a_device_in_the_implementation_folder_is_refused_and_nothing_staged(tmp_path: Path) -> None:
    """A character device with /dev/zero's numbers (made by root, as a package unpacked by root may hold one): the
    staging never opens it (reading it would never end) and names it, as it names a FIFO."""
    impl = _package(tmp_path) / "benchmarks" / "resnet" / "implementations" / "impl"
    try:
        os.mknod(impl / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        require(False, "making a character device needs root (CI runs as root)")
    with pytest.raises(ReproduceError, match=r"zero \(not a regular file\)"):
        stage.stage(impl, tmp_path / "staged")
    assert not (tmp_path / "staged").exists()
