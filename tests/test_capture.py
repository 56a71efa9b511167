"""Config files are captured by a job (mlrepro/runs/capture.py, rules/runs.smk ``capture``): planning runs nothing of
them; a record is named by what its capture read, so that a changed file of the folder or a changed file it sources
from outside it captures again, and a touched file or a capture made again keeps finished runs; a capture that fails
names the file and what to do."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from mlrepro.core.hashing import sha256_file
from mlrepro.runs import capture, capture_job
from tests.conftest import SYSTEM, snakemake
from tests.test_implementations import _echo_config, _echo_impl, _run_targets


def _records(folder: Path) -> dict[str, capture.Record]:
    """What the capture job writes, by name, for ``record_of`` of :func:`capture.key`."""
    return {p.stem: capture.read(p) for p in folder.glob("*.json")}


def _key(impl: Path, records: Path) -> str:
    found = _records(records)
    return capture.key(impl, "config_CPU.sh", capture.folder_digest(impl), found.get)


def test_what_a_config_file_sources_outside_its_folder_is_followed(tmp_path: Path) -> None:
    impl = _echo_impl(tmp_path / "impl")
    shared = tmp_path / "site" / "common.sh"
    shared.parent.mkdir()
    shared.write_text("export LR=0.1\n")
    (impl / "config_CPU.sh").write_text(f"export DGXNNODES=1\nexport DGXNGPU=0\nsource {shared}\n"
                                        "source $(dirname ${BASH_SOURCE[0]})/inside.sh\n")
    (impl / "inside.sh").write_text("export WALLTIME=5\n")
    records = tmp_path / "captures"
    first = _key(impl, records)
    record = capture.source_native(impl / "config_CPU.sh")
    assert record.env == {"DGXNNODES": "1", "DGXNGPU": "0", "LR": "0.1", "WALLTIME": "5"}
    assert set(record.sourced) == {str(shared), str(impl / "inside.sh")}
    assert record.outside() == {str(shared): sha256_file(shared)}
    capture.write(record, records / f"{first}.json")
    assert _key(impl, records) == first  # captured: the same name
    os.utime(impl / "run_and_time.sh")  # a touched file of the folder, the same content: the same record
    assert _key(impl, records) == first
    shared.write_text("export LR=0.2\n")  # the file outside changed: captured again, under a name of its own
    second = _key(impl, records)
    assert second != first
    capture.write(capture.source_native(impl / "config_CPU.sh"), records / f"{second}.json")
    assert _key(impl, records) == second and capture.read(records / f"{second}.json").env["LR"] == "0.2"
    shared.write_text("export LR=0.1\n")  # back as it was: the first record again
    assert _key(impl, records) == first
    (impl / "inside.sh").write_text("export WALLTIME=6\n")  # a file of the folder: a new record
    assert _key(impl, records) not in (first, second)


def test_a_record_belongs_to_its_folders_path_only_where_its_variables_name_it(tmp_path: Path) -> None:
    impl = _echo_impl(tmp_path / "impl")
    records = tmp_path / "captures"
    plain = _key(impl, records)
    capture.write(capture.source_native(impl / "config_CPU.sh"), records / f"{plain}.json")
    moved = Path(shutil.copytree(impl, tmp_path / "moved"))
    assert _key(moved, records) == plain  # the same content elsewhere: the same record
    (impl / "config_CPU.sh").write_text('export DGXNNODES=1\nexport DGXNGPU=0\nexport HERE="$(pwd)/data"\n')
    (moved / "config_CPU.sh").write_text((impl / "config_CPU.sh").read_text())
    named = _key(impl, records)
    record = capture.source_native(impl / "config_CPU.sh")
    assert record.env["HERE"] == f"{impl}/data" and record.names_folder()
    capture.write(record, records / f"{named}.json")
    assert _key(impl, records) == named
    assert _key(moved, records) != named  # its variables name the folder: elsewhere, it is captured again


def test_a_failing_config_file_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    impl = _echo_impl(tmp_path / "impl")
    (impl / "config_CPU.sh").write_text("echo 'no such cluster' >&2\nexit 4\n")
    with pytest.raises(capture.CaptureError, match=rf"{impl}/config_CPU.sh: sourcing it with bash failed \(exit 4\):"
                                                   r"\nno such cluster\nFix the config file, or choose another"):
        capture.source_native(impl / "config_CPU.sh")
    with pytest.raises(capture.CaptureError, match=r"config_GPU.sh: no such config file; set benchmarks.<bm>."
                                                   r"system_config to one of the folder's config_<SYSTEM>.sh files "
                                                   r"\(there: config_CPU.sh\)"):
        capture.source_native(impl / "config_GPU.sh")
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"version": capture.VERSION, "env": []}))
    with pytest.raises(capture.CaptureError, match=r"record.json: not a config file's capture record .*remove it"):
        capture.read(record)


# Slurm's commands as a one-partition cluster of one node (8 CPUs, 4 GPUs) answers them
FAKE_SCONTROL = """#!/bin/sh
case "$1 $2" in
  "ping "*) echo "Slurmctld(primary) at ctl is UP" ;;
  "show partition") echo "PartitionName=p Default=YES Nodes=n1 TotalNodes=1 MaxNodes=UNLIMITED MaxTime=UNLIMITED" ;;
  "show node") echo "NodeName=n1 CPUTot=8 Gres=gpu:4" ;;
esac
"""


def test_on_slurm_the_capture_job_checks_the_shapes_it_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first run's capture jobs check the job shapes of the config files against the partition, as the onstart
    hook does for the shapes it knows then: a run on more nodes than the partition has stops there, named."""
    from tests.test_vendor_launch import _config, _folder, _uncaptured

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sbatch", "srun", "squeue", "sacct", "sinfo", "scontrol"):
        # srun --help names pyxis' --container-image (engine enroot, several processes per node)
        (bin_dir / name).write_text(FAKE_SCONTROL if name == "scontrol" else "#!/bin/sh\necho --container-image\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _folder(tmp_path)
    plan = _uncaptured(_config(tmp_path, {"EXTRADIR": "/x"}), tmp_path)
    # before the capture: what the config gives is known, what the config file gives raises (a <TBD> in a dry run)
    resources = plan.run_resources()
    assert (resources["slurm_extra"], resources["cpus_per_task"], resources["mem_mb"]) == ("--exclusive", -1, 0)
    w = type("W", (), {"system": "sim_n2", "benchmark": "resnet"})()
    with pytest.raises(FileNotFoundError):
        resources["nodes"](w)
    keys = {unit: plan.captures.keys[unit] for unit in plan.ordered_units}
    n1, n2 = keys[("sim_n1", "resnet")], keys[("sim_n2", "resnet")]
    assert plan.capture_preflight(n2)["units"] == {"sim_n2/resnet": {"configured": None, "nodes": 2,
                                                                      "sbatch": ("--exclusive", "--mem=0")}}
    capture_job.capture(plan.capture_source(n1), plan.out.capture(n1), plan.capture_checks(n1),
                        plan.capture_preflight(n1))  # one node of 4 GPUs: it fits
    with pytest.raises(capture.CaptureError, match=r"^Slurm: job shape of sim_n2/resnet .* too large: 2 nodes, "
                                                   r"partition p has 1$"):
        capture_job.capture(plan.capture_source(n2), plan.out.capture(n2), plan.capture_checks(n2),
                            plan.capture_preflight(n2))
    assert plan.out.capture(n1).is_file() and not plan.out.capture(n2).exists()
    assert plan.run_shapes == {"sim_n1/resnet": plan.launches.shape("sim_n1", "resnet")}  # what onstart checks now
    assert resources["nodes"](type("W", (), {"system": "sim_n1", "benchmark": "resnet"})()) == 1


@pytest.mark.integration
def test_planning_runs_no_config_file_and_finished_runs_stay_finished(tmp_path: Path) -> None:
    """A config file that leaves a marker when it is sourced: none after a dry run (the runs' shapes <TBD>), one
    after the real run, whose capture job sources it. A touched file of the folder, a capture made again: no run
    again. A changed file the config file sources from outside its folder: captured again, and every run again."""
    shared = tmp_path / "site" / "common.sh"
    shared.parent.mkdir()
    shared.write_text("export LR=0.1\n")
    marker = tmp_path / "SOURCED"
    config = _echo_config(tmp_path, "echo.yaml", {"resnet": 2})
    impl = tmp_path / "impl"
    (impl / "config_CPU.sh").write_text(f"echo sourced >> {marker}\nexport DGXNNODES=1\nexport DGXNGPU=0\n"
                                        f"export WALLTIME=5\nsource {shared}\n")
    targets = _run_targets({"resnet": 2})
    dry = snakemake(tmp_path, *targets, "--configfile", str(config), "-n")
    assert not marker.exists() and not (tmp_path / "results").exists()
    text = dry.stdout + dry.stderr
    assert re.search(r"^capture\s+1$", text, re.M) and re.search(r"^run\s+2$", text, re.M), text[-3000:]
    assert "runtime=<TBD>" in text

    snakemake(tmp_path, *targets, "--configfile", str(config))
    assert marker.read_text() == "sourced\n"  # once, by the capture job
    runs = [tmp_path / f"results/runs/{SYSTEM}/resnet/{i}/run.json" for i in range(2)]
    stamps = [r.stat().st_mtime_ns for r in runs]
    (record,) = (tmp_path / "results" / "pipeline_info" / "captures").glob("*.json")
    assert json.loads(record.read_text())["env"]["LR"] == "0.1"

    def again(*args: str) -> str:
        out = snakemake(tmp_path, *targets, "--configfile", str(config), *args)
        return out.stdout + out.stderr

    os.utime(impl / "run_and_time.sh")  # touched, the same content
    assert "Nothing to be done" in again()
    assert "localrule capture:" in again("--forcerun", "capture")  # captured again: the same record
    assert marker.read_text() == "sourced\n" * 2
    assert [r.stat().st_mtime_ns for r in runs] == stamps  # the runs kept
    assert "Nothing to be done" in again()

    shared.write_text("export LR=0.2\n")  # outside the folder: followed
    text = again()
    assert "localrule capture:" in text and text.count("rule run:") == 2
    assert all(r.stat().st_mtime_ns > s for r, s in zip(runs, stamps, strict=True))
    assert "Nothing to be done" in again()


@pytest.mark.integration
def test_a_capture_that_fails_names_the_file_and_what_to_do(tmp_path: Path) -> None:
    config = _echo_config(tmp_path, "echo.yaml", {"resnet": 1})
    impl = tmp_path / "impl"
    (impl / "config_CPU.sh").write_text("echo 'this cluster is gone' >&2\nexit 3\n")
    proc = snakemake(tmp_path, *_run_targets({"resnet": 1}), "--configfile", str(config), check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"error: {impl}/config_CPU.sh: sourcing it with bash failed (exit 3):\nthis cluster is gone\n" in text
    assert "Fix the config file, or choose another with benchmarks.<bm>.system_config" in text
    assert "Traceback" not in text and not list((tmp_path / "results" / "pipeline_info").rglob("*.json"))
    # a check that needs the variables (here: the job shape) fails the capture the same way, naming the key
    (impl / "config_CPU.sh").write_text("export DGXNNODES=1\nexport WALLTIME=5\n")
    proc = snakemake(tmp_path, *_run_targets({"resnet": 1}), "--configfile", str(config), check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in text
    assert (f"benchmarks.resnet.system_config: {impl}/config_CPU.sh: it does not export DGXNGPU, which gives the "
            "job's shape; add `export DGXNGPU=<n>` to it") in text
