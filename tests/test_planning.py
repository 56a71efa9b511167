"""The planning step (mlrepro/planning/): Snakemake's read-only modes change nothing in a finished output folder;
a damaged one is refused until `snakemake repair`, which says each change it makes; the launch spec is typed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlrepro.runs.launch_spec import LaunchSpec, LaunchSpecError
from tests.conftest import REPO, SYSTEM, refused, snakemake

CONFIG = ("--configfile", str(REPO / "config" / "test.yaml"), "--config", "inference={benchmarks: []}")
SHARED = ("--configfile", str(REPO / "config" / "test.yaml"))  # the shared run's own (tiny_pipeline)
# Every mode that parses the Snakefile (and, but for the last two, builds the DAG) without running a job.
READ_ONLY = (["-n"], ["--summary"], ["--dag"], ["--list-rules"], ["--lint"])
DAG_MODES = READ_ONLY[:3]  # the modes that build the DAG: the ones whose work depends on the folder's state


def _state(folder: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every entry under ``folder``: a file's bytes and mtime, a folder's presence."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else None
            for p in sorted(folder.rglob("*"))}


def _dag_modes(workdir: Path, config: tuple[str, ...]) -> str:
    """The read-only modes that build the DAG, in ``workdir``: each succeeds; what -n printed."""
    printed = {}
    for mode in DAG_MODES:
        proc = snakemake(workdir, *config, *mode, check=False)
        assert proc.returncode == 0, (mode, proc.stderr[-3000:])
        printed[mode[0]] = proc.stdout
    return printed["-n"]


@pytest.mark.integration
def test_read_only_modes_change_nothing_in_a_finished_folder(tiny_package: Path) -> None:
    before = _state(tiny_package)
    assert "report.html" in before and "pipeline_info/environment.json" in before
    # the modes that build the DAG (--list-rules and --lint build none: what they do is the same in every folder,
    # checked in a damaged one below, where they change nothing either and are not refused)
    _dag_modes(tiny_package.parent, CONFIG)
    assert _state(tiny_package) == before


@pytest.mark.integration
def test_damage_is_refused_and_repair_says_and_makes_each_change(tiny_package: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(tiny_package.parent, work, symlinks=True)
    results = work / "results"
    # A removed intermediate file: `all` asks for it by name, so that it is made again with what depends on it.
    (results / "compliance" / SYSTEM / "resnet" / "0.json").unlink()
    before = _state(results)
    # the modes that build the DAG, where planning finds the file missing (--list-rules and --lint build none: what
    # they do is the same in every folder, checked in a damaged one below)
    dry = _dag_modes(work, SHARED)
    assert _state(results) == before
    assert "0.json: missing; it is made again, and what depends on it" in dry
    assert _stale(dry)

    data = results / "data" / "resnet"
    victim = next(p for p in sorted(data.glob("*.npz")))
    victim_bytes = victim.read_bytes()
    victim.write_bytes(b"changed")  # repair regenerates the dataset
    (data / ".receipt.json").unlink()  # it names the copied-from folder: without it, every file is hashed
    packaged = next((results / "submission").glob("*/results/*/resnet/result_0.txt"))
    packaged.write_bytes(packaged.read_bytes() + b"\n")  # repair removes the package's verdict and the report
    before = _state(results)
    for mode in READ_ONLY:  # the modes that build the DAG refuse, naming the repair; none writes
        proc = snakemake(work, *SHARED, *mode, check=False)
        if mode in (["--list-rules"], ["--lint"]):
            assert proc.returncode == 0 or mode == ["--lint"], (mode, proc.stderr[-3000:])
        else:
            refused(proc, "the output folder needs repairs before a run", "Run `snakemake repair`",
                    f"the submission package differs from what the package step wrote ({packaged.relative_to(work)}",
                    f"dataset {data.relative_to(work)} no longer matches its manifest ({victim.relative_to(work)}")
    assert _state(results) == before
    said = snakemake(work, "repair", "-n", *SHARED).stdout  # says what it will change, changes nothing
    assert "remove results/package_check.json and results/report.html" in said
    assert f"dataset {data.relative_to(work)} no longer matches its manifest" in said
    assert "regenerate it in place" in said
    assert _state(results) == before

    snakemake(work, "repair", *SHARED)
    assert not (results / "package_check.json").exists() and not (results / "report.html").exists()
    assert victim.read_bytes() == victim_bytes  # regenerated in place, the same bytes
    after = _state(results)
    changed = {k for k in before.keys() | after.keys() if (before.get(k) or (None,))[0] != (after.get(k) or (None,))[0]}
    # besides: the lock's holder, and the launch file, which names the folder this copy was made from
    assert changed <= {"package_check.json", "report.html", "data/resnet/.receipt.json", f"data/resnet/{victim.name}",
                       "pipeline_info/logs/repair.log", ".mlrepro.lock", f"runs/{SYSTEM}/resnet/launch.json"}, changed
    made = snakemake(work, *SHARED)  # what it ran: what its DAG planned, as -n prints it (the dry run above)
    assert _stale(made.stdout + made.stderr)
    again = snakemake(work, *SHARED)
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.integration
def test_a_manual_dataset_is_named_by_a_dry_run(tmp_path: Path) -> None:
    """`benchmarks.resnet.data: recipe` (ImageNet is downloaded by hand): -n names the files to fetch, exit 1,
    no traceback; nothing is written (issue 34)."""
    proc = snakemake(tmp_path, "-n", *CONFIG, "only=[resnet]", "benchmarks={resnet: {data: recipe}}", check=False)
    downloads = tmp_path / "results" / "datasets" / "resnet" / "downloads"
    text = refused(proc, "error: datasets to download by hand:",
                   f"{downloads / 'ILSVRC2012_img_train.tar'}: get it from",
                   f"{downloads / 'ILSVRC2012_img_val.tar'}: get it from")
    assert "InputFunctionException" not in text and "prepare.py" not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == [".snakemake"]  # Snakemake's own records only


def _stale(printed: str) -> bool:
    """A (dry) run plans run 0's compliance verdict and what derives from the verdicts, and nothing upstream: no
    run, no dataset, no spec (the counts of the first "Job stats" table it printed)."""
    table = printed.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    jobs = {name: int(count) for name, count in (line.split() for line in table.strip().splitlines()[2:])}
    assert jobs["compliance"] == 1 and {"package", "score", "report", "all"} <= jobs.keys(), jobs
    assert not {"run", "data", "spec", "environment"} & jobs.keys(), jobs
    return True


def test_launch_spec_round_trip_and_strict_reading(tmp_path: Path) -> None:
    spec = LaunchSpec(benchmark="resnet", kind="mini", name="mini", folder="/w/resnet", config_file="config_CPU.sh",
                      env={"DGXNGPU": "0"}, params={"lr": 0.1}, data_dir="/d", submission={"org": "o"})
    path = tmp_path / "launch.json"
    spec.write(path)
    assert LaunchSpec.read(path) == spec
    stamp = path.stat().st_mtime_ns
    spec.write(path)  # unchanged: not rewritten
    assert path.stat().st_mtime_ns == stamp
    path.write_text(json.dumps({**spec.to_dict(), "dataDir": "/x"}))
    with pytest.raises(LaunchSpecError, match=r"launch.json: unknown keys dataDir"):
        LaunchSpec.read(path)
    data = spec.to_dict()
    del data["folder"]
    path.write_text(json.dumps(data))
    with pytest.raises(LaunchSpecError, match="missing keys folder"):
        LaunchSpec.read(path)
