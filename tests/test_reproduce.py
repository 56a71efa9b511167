"""The reproduce target on a package the pipeline made: same seeds, same epochs and metrics; a changed
hyperparameter named; what is missing named before any run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mlrepro import jobs as jobs_table
from mlrepro.core import outdir_lock
from mlrepro.package.provenance import package_files
from mlrepro.reproduce import locate, verify
from mlrepro.reproduce import plan as reproduce
from mlrepro.reproduce.errors import ReproduceError
from mlrepro.reproduce.results import read_log
from tests.conftest import REPO, SYSTEM, refused, require, snakemake

pytestmark = pytest.mark.integration


def _reproduce(workdir: Path, package: Path, *config: str, check: bool = True):
    return snakemake(workdir, "--config", f"reproduce={package}", "only=[resnet]", *config, check=check)


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file and link under ``folder`` with its bytes (a link: its target) and mtime."""
    return {p.relative_to(folder).as_posix(): (os.readlink(p).encode() if p.is_symlink() else p.read_bytes(),
                                               os.lstat(p).st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


def test_package_reproduces_bit_identically_on_cpu(tiny_package: Path, tmp_path: Path) -> None:
    org = tiny_package / "submission" / "mlrepro"
    # Two runs against five: the smallest attainable Mann-Whitney p is 0.095, so times on this shared,
    # loaded machine inform the report but cannot fail the verdict; seeds, epochs and metrics decide it.
    _reproduce(tmp_path, org, "runs=2")
    doc = json.loads((tmp_path / "reproduction" / "reproduction.json").read_text())
    assert doc["verdict"] == "reproduced", doc["benchmarks"][0]["reasons"]
    bench = doc["benchmarks"][0]
    manifest = json.loads((org / "provenance.json").read_text())
    assert [r["seed"] for r in bench["runs"]] == [r["seed"] for r in manifest["runs"][:2]]
    for run in bench["runs"]:
        assert run["reproduced_seed"] == run["seed"] and run["compliant"] is True
        assert run["reproduced_epochs"] == run["submitted_epochs"]
        assert run["metrics_identical"] and run["reproduced_evals"] == run["submitted_evals"]
        assert run["hyperparameter_differences"] == []
    assert bench["dataset"]["identical"]
    assert bench["dataset"]["submitted_sha256"] == manifest["datasets"]["resnet"]["sha256"]
    assert bench["times"]["test"] == "Mann-Whitney U, two-sided" and bench["times"]["p"] is not None
    # the numeric verdict: the time to train's ratio with its interval (reported: two runs do not decide)
    figures = bench["numeric"]
    assert re.match(r"time to train (within |\d+\.\d% (longer|shorter) than)", figures["line"]), figures["line"]
    assert "95% interval [" in figures["line"] and not figures["time_decides"] and figures["tolerance"] == 0.025
    assert figures["time_to_train"]["low"] <= figures["time_to_train"]["ratio"] <= figures["time_to_train"]["high"]
    assert bench["olympic_submitted"] == pytest.approx(json.loads((tiny_package / "scores.json").read_text())
                                                       [SYSTEM]["resnet"]["minutes"])
    html = (tmp_path / "reproduction" / "reproduction.html").read_text()
    assert "Verdict: <strong class=\"ok\">reproduced</strong>" in html and "bit-identical" in html
    assert figures["line"] in html and "Mann-Whitney U" in html
    assert manifest["runs"][0]["file"].rsplit("/", 1)[1] in html
    # the reproduction's runs are on the record too: one ledger launch each
    # (the pipeline's run stage, its layout under reproduce_out: runs/<system>/<benchmark>/<run>)
    runs = tmp_path / "reproduction" / "runs" / SYSTEM / "resnet"
    assert len((runs / "0" / "ledger.jsonl").read_text().splitlines()) == 2
    # through the pipeline's run driver, from the package's own implementation folder: its run_and_time.sh
    # and config_CPU.sh, and its training code (imported from the staged copy, not the pipeline's)
    staged = (tmp_path / "reproduction" / "implementation" / "resnet").resolve()
    run = json.loads((runs / "0" / "run.json").read_text())
    assert run["implementation"] == {"kind": "mini", "name": "mlrepro-pytorch", "config_file": "config_CPU.sh",
                                     "folder": str(staged / "minis" / "resnet")}
    launch = json.loads((runs / "launch.json").read_text())
    assert launch["env"]["PYTHONPATH"] == str(staged) and launch["params"]["lr"] == 0.1
    assert not list(org.rglob("__pycache__"))  # nothing written into the audited package
    # checked against its manifest before anything ran, and found unchanged after
    check = json.loads((tmp_path / "reproduction" / "package_check.json").read_text())
    assert check["manifest"]["verified"] and check["files"] == {**package_files(org), **{
        n: check["files"][n] for n in ("provenance.json", "provenance.sha256")}}
    assert doc["package_changes"] == []


def test_changed_hyperparameter_is_not_reproduced_and_named(tiny_package: Path, tmp_path: Path) -> None:
    changed = tmp_path / "changed.yaml"
    changed.write_text("benchmarks:\n  resnet: {lr: 0.05}\n")
    _reproduce(tmp_path, tiny_package / "submission" / "mlrepro", "runs=1", "--configfile", str(changed))
    doc = json.loads((tmp_path / "reproduction" / "reproduction.json").read_text())
    assert doc["verdict"] == "not reproduced"
    reasons = doc["benchmarks"][0]["reasons"]
    assert any("sgd_opt_base_learning_rate" in r and "0.1" in r and "0.05" in r for r in reasons), reasons
    assert "sgd_opt_base_learning_rate: 0.1 → 0.05" in (tmp_path / "reproduction" / "reproduction.html").read_text()


def test_missing_implementation_and_system_are_named_before_any_run(tiny_package: Path, tmp_path: Path) -> None:
    org = Path(shutil.copytree(tiny_package / "submission" / "mlrepro", tmp_path / "pkg" / "mlrepro"))
    refused(_reproduce(tmp_path, org, "system=DGXA100", "-n", check=False), "no results for system 'DGXA100'")
    shutil.rmtree(org / "benchmarks" / "resnet" / "implementations")
    # the same refusal (the plan's ReproduceError, which rules/reproduce.smk raises as Snakemake's WorkflowError, as
    # above), by the plan the rules file makes of this config, in this process
    with pytest.raises(ReproduceError) as refusal:
        reproduce.plan(org, system="auto", only=["resnet"], runs=None, overrides={}, default_data_seed=20220629)
    assert "no runnable implementation of resnet" in str(refusal.value) and "only=[...]" in str(refusal.value)
    assert not (tmp_path / "reproduction").exists()


def test_plan_without_manifest_uses_logged_seeds_with_a_note(tiny_package: Path, tmp_path: Path) -> None:
    org = Path(shutil.copytree(tiny_package / "submission" / "mlrepro", tmp_path / "mlrepro"))
    (org / "provenance.json").unlink()
    p = reproduce.plan(org, system="auto", only=[], runs=None, overrides={}, default_data_seed=20220629)
    logged = [read_log(Path(f)).seed for f in p.benchmarks["resnet"].result_files]
    assert p.runs == 5 and p.benchmarks["resnet"].seeds == logged and not p.manifest
    assert any("no provenance.json" in n for n in p.notes)


SHARED = REPO.parent / "shared" / "data"
NVIDIA_SYSTEM = "dgxa100_ngc21.09_mxnet"


@pytest.fixture
def nvidia_package(nvidia_benchmarks: Path, tmp_path: Path) -> Path:
    """NVIDIA's v1.1 organisation folder for ResNet on DGX A100: its systems/ and results/ from the round,
    around the benchmarks/ of the shared fixture (NVIDIA's own implementation folders)."""
    results = SHARED / "mlperf_training_results_v1.1.tar.xz"
    require(results.is_file(), f"{results} is absent")
    subprocess.run(["tar", "-xJf", str(results), "-C", str(tmp_path), f"./NVIDIA/results/{NVIDIA_SYSTEM}/resnet",
                    f"./NVIDIA/systems/{NVIDIA_SYSTEM}.json"], check=True)
    org = tmp_path / "NVIDIA"
    # a copy, as a package holds it (a package's links stay inside it)
    shutil.copytree(nvidia_benchmarks / "resnet", org / "benchmarks" / "resnet", symlinks=True)
    return org


def test_nvidia_v11_package_plans_with_its_own_folder_and_dgxa100_config(nvidia_package: Path,
                                                                         tmp_path: Path) -> None:
    """The reproduce target on NVIDIA's v1.1 package layout plans (-n) the package's own mxnet folder with
    config_DGXA100.sh, the logged seeds, through the pipeline's run driver; once the staged config file is captured (a
    job), its job shape (1 node x 8 GPUs) is the runs'."""
    org = nvidia_package
    impl = locate.locate_implementation(org, "resnet", NVIDIA_SYSTEM)
    assert impl.kind == "folder" and impl.folder == org / "benchmarks" / "resnet" / "implementations" / "mxnet"
    assert impl.config.name == "config_DGXA100.sh"
    data = tmp_path / "imagenet"
    data.mkdir()
    config = ("--config", f"reproduce={org}", f"system={NVIDIA_SYSTEM}", "only=[resnet]", "runs=3",
              f"benchmarks={{resnet: {{data_dir: {data}}}}}")
    out = snakemake(tmp_path, *config, "-n", "--resources", "gpus=8")
    text = out.stdout + out.stderr
    seeds = [read_log(org / "results" / NVIDIA_SYSTEM / "resnet" / f"result_{i}.txt").seed
             for i in range(3)]
    assert f"resnet: {impl.folder} with config_DGXA100.sh, 3 run(s), seeds {seeds}" in text
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", text, re.M))
    assert jobs["reproduce_stage"] == "1" and jobs["run"] == "3" and jobs["compliance"] == "3"
    assert jobs["capture"] == "1" and jobs["launch"] == "1"
    assert "reproduce_data" not in jobs  # the given dataset folder, not a generated one
    # the pipeline's run stage: its rules (rules/runs.smk, rules/compliance.smk) and their jobs' entry functions, on
    # the staged copy's capture record, with the reproduction's outputs; no rule of its own (rules/reproduce.smk)
    assert not {"reproduce_capture", "reproduce_launch", "reproduce_run", "reproduce_compliance"} & set(
        jobs_table.ENTRIES)
    run_jobs = [j for j in re.split(r"^(?=rule \w+:)", text, flags=re.M) if j.startswith("rule run:")]
    assert len(run_jobs) == 3 and all("reproduction/pipeline_info/captures/resnet.json" in j and
                                      f"reproduction/runs/{NVIDIA_SYSTEM}/resnet/" in j for j in run_jobs), run_jobs[:1]
    runs = re.findall(r"resources: .*gpus=.*", text)
    assert len(runs) == 3 and all("gpus=<TBD>" in r and "nodes=<TBD>" in r for r in runs), runs[:1]  # not captured
    assert not (tmp_path / "reproduction").exists()  # a dry run writes nothing
    # what the run driver will read: the staged copy of the package's folder, its config captured there (a job)
    runs_dir = tmp_path / "reproduction" / "runs" / NVIDIA_SYSTEM / "resnet"
    snakemake(tmp_path, *config, "--", str((runs_dir / "launch.json").relative_to(tmp_path)))
    launch = json.loads((runs_dir / "launch.json").read_text())
    assert launch["folder"] == str((tmp_path / "reproduction" / "implementation" / "resnet").resolve())
    assert (launch["kind"], launch["name"], launch["config_file"]) == ("folder", "mxnet", "config_DGXA100.sh")
    assert launch["env"]["DGXSYSTEM"] == "DGXA100" and launch["env"]["DGXNGPU"] == "8" and launch["gpus"] == 8
    assert launch["data_dir"] == str(data) and launch["submission"]["org"] == "NVIDIA"
    # the runs' seeds (run i: the i-th), as the plan the steps read gives them: the logged ones
    assert json.loads((tmp_path / "reproduction" / "plan.json").read_text())["benchmarks"]["resnet"]["seeds"] == seeds
    assert not (runs_dir / "0").exists()
    runs = re.findall(r"resources: .*gpus=8.*", snakemake(tmp_path, *config, "-n", "--resources", "gpus=8").stdout)
    assert len(runs) == 3 and all("nodes=1, tasks=8" in r and "runtime=" in r for r in runs), runs[:1]


def test_nvidia_v11_package_names_what_is_missing(nvidia_package: Path) -> None:
    org = nvidia_package
    with pytest.raises(ReproduceError, match=r"resnet: mxnet runs on its prepared dataset, and none was "
                       r"given.*benchmarks\.resnet\.data_dir \(mounted at /data\)"):
        reproduce.plan(org, system=NVIDIA_SYSTEM, only=["resnet"], runs=None, overrides={}, default_data_seed=0)
    with pytest.raises(ReproduceError, match=r"resnet: lr: mxnet takes its hyperparameters from "
                       r"config_DGXA100\.sh"):
        reproduce.plan(org, system=NVIDIA_SYSTEM, only=["resnet"], runs=None, overrides={"resnet": {"lr": 1}},
                       default_data_seed=0, data_dirs={"resnet": str(org)})
    with pytest.raises(ReproduceError, match=r"no config file for system dgxa100_ngc21\.09_mxnet named "
                       r"config_DGX2\.sh"):
        locate.locate_implementation(org, "resnet", NVIDIA_SYSTEM, "config_DGX2.sh")
    with pytest.raises(ReproduceError, match="no config file for system dgx2"):
        locate.locate_implementation(org, "resnet", "dgx2_ngc21.09_mxnet")


def test_outside_implementation_package_reproduces(tmp_path: Path) -> None:
    """A third-party implementation's package (tests/fixtures/outside_impl, run by the pipeline) reproduces
    the same way: its own folder from the package, its config_CPU.sh (the submission's system_config), the
    given dataset folder, the same seed, the same metrics. One run each: which run takes which seed is the same for
    every kind of implementation, and test_package_reproduces_bit_identically_on_cpu's two runs check it."""
    from tests.test_implementations import OUTSIDE, _points

    data = _points(tmp_path / "data")
    cfg = {"telemetry": {"enabled": False}, "only": ["resnet"], "allow_fewer_runs": True,
           "inference": {"benchmarks": []}, "benchmarks": {"resnet": {
               "implementation": str(OUTSIDE), "system_config": "config_CPU.sh", "data_dir": str(data), "runs": 1}}}
    (tmp_path / "outside.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(tmp_path / "submitter", "--configfile", str(tmp_path / "outside.yaml"))
    org = tmp_path / "submitter" / "results" / "submission" / "mlrepro"
    assert (org / "benchmarks" / "resnet" / "implementations" / "outside_impl" / "run_and_time.sh").is_file()
    _reproduce(tmp_path / "auditor", org, "runs=1", f"benchmarks={{resnet: {{data_dir: {data}}}}}")
    doc = json.loads((tmp_path / "auditor" / "reproduction" / "reproduction.json").read_text())
    assert doc["verdict"] == "reproduced", doc["benchmarks"][0]["reasons"]
    manifest = json.loads((org / "provenance.json").read_text())
    runs = doc["benchmarks"][0]["runs"]
    assert [r["seed"] for r in runs] == [r["seed"] for r in manifest["runs"]] and len(runs) == 1
    assert all(r["metrics_identical"] and r["compliant"] and r["reproduced_seed"] == r["seed"] for r in runs)
    run_dir = tmp_path / "auditor" / "reproduction" / "runs" / SYSTEM / "resnet" / "0"
    run = json.loads((run_dir / "run.json").read_text())
    staged = (tmp_path / "auditor" / "reproduction" / "implementation" / "resnet").resolve()
    assert run["implementation"] == {"kind": "folder", "name": "outside_impl", "folder": str(staged),
                                     "config_file": "config_CPU.sh"}
    assert "RESULT,outside," in (run_dir / "train.log").read_text()


def _hostile_copy(tiny_package: Path, tmp_path: Path, canary: Path) -> Path:
    """A copy of the package whose resnet config file would, if sourced, create ``canary`` and write into the
    package."""
    org = Path(shutil.copytree(tiny_package / "submission" / "mlrepro", tmp_path / "pkg" / "mlrepro", symlinks=True))
    config = next(org.glob("benchmarks/resnet/implementations/*/minis/resnet/config_CPU.sh"))
    config.write_text(config.read_text() + f"$(touch {canary})\nexport X=`touch {canary}`\n"
                      f"echo written > {org}/written_by_config\n")
    return org


def test_hostile_package_stays_inert_while_planning(tiny_package: Path, tmp_path: Path) -> None:
    """-n, --summary and --dag: the package's config file is never sourced (its canary never made), nothing is written
    into the package (bytes and mtimes), nor into the reproduction's folder. (--list-rules parses the rules as each of
    these does, and builds no DAG: what -n does, less.)"""
    canary = tmp_path / "CANARY"
    org = _hostile_copy(tiny_package, tmp_path, canary)
    before = _snapshot(org)
    work = tmp_path / "work"
    for flag in ("-n", "--summary", "--dag"):
        out = _reproduce(work, org, "runs=1", flag)
        assert flag != "-n" or "rule run:" in out.stdout + out.stderr
        assert not canary.exists(), flag
        assert _snapshot(org) == before, flag
        assert not (work / "reproduction").exists(), flag


def test_package_edited_after_packaging_stops_before_anything_runs(tiny_package: Path, tmp_path: Path) -> None:
    """A real run verifies the package first: an edited config file (which would run the canary) or an edited
    result stops it, naming the file; nothing was staged or run, the package is unchanged."""
    canary = tmp_path / "CANARY"
    org = _hostile_copy(tiny_package, tmp_path, canary)
    before = _snapshot(org)
    out = _reproduce(tmp_path / "work", org, "runs=1", check=False)
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "does not match its provenance.json" in text
    assert re.search(r"benchmarks/resnet/implementations/[\w-]+/minis/resnet/config_CPU\.sh changed", text)
    assert not canary.exists() and _snapshot(org) == before
    assert not (tmp_path / "work" / "reproduction" / "implementation").exists()

    # an edited result: the same check (the package's, whose refusal stopped the run above before anything was
    # staged), on the pipeline's package, in this process
    org = Path(shutil.copytree(tiny_package / "submission" / "mlrepro", tmp_path / "pkg2" / "mlrepro"))
    result = next(org.glob("results/*/resnet/result_0.txt"))
    result.write_text(result.read_text().replace('"status": "success"', '"status": "success" '))
    with pytest.raises(ReproduceError) as refusal:
        verify.before(org.resolve())
    assert f"the result file {result.relative_to(org)} changed" in str(refusal.value)


@contextlib.contextmanager
def held(folder: Path) -> Iterator[int]:
    """``folder``'s output lock held by another process (another pipeline) while inside; its pid."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from mlrepro.core import outdir_lock; "
         f"outdir_lock.acquire(Path({str(folder)!r})); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.communicate("")


def test_one_reproduction_at_a_time_per_reproduce_out(tiny_package: Path, tmp_path: Path) -> None:
    """Two working folders, one reproduce_out: the second stops before any job, naming the holder."""
    out_dir = tmp_path / "shared_out"
    with held(out_dir) as pid:
        out = _reproduce(tmp_path / "second", tiny_package / "submission" / "mlrepro", "runs=1",
                         f"reproduce_out={out_dir}", check=False)
        refused(out, "in use by another mlrepro pipeline", str(pid))
        assert sorted(p.name for p in out_dir.iterdir()) == [outdir_lock.LOCK_NAME]  # no job ran


def test_outdir_is_refused_in_reproduce_mode(tiny_package: Path, tmp_path: Path) -> None:
    out = _reproduce(tmp_path, tiny_package / "submission" / "mlrepro", "outdir=elsewhere", "-n", check=False)
    refused(out, "give reproduce_out=elsewhere instead")
    org = Path(shutil.copytree(tiny_package / "submission" / "mlrepro", tmp_path / "pkg" / "mlrepro"))
    out = _reproduce(tmp_path, org, f"reproduce_out={org / 'out'}", "-n", check=False)
    refused(out, "overlap: a reproduction never writes into the package")
    refused(_reproduce(org / "benchmarks", org, "-n", check=False), "lies inside the package")
