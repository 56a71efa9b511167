"""The warm start (mlrepro/runs/warm.py): a run forked from the warm parent is the run the cold path makes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlrepro.runs import ledger, warm
from mlrepro.runs.launch_spec import LaunchSpec
from mlrepro.telemetry.host import ROOTS_ENV
from tests.conftest import REPO, SNAKEMAKE, SYSTEM, dispatch, make_job, snakemake

CONFIG = "only: [resnet]\nallow_fewer_runs: true\nbenchmarks:\n  resnet: {runs: 2}\n"


def _parents_alive(base: Path) -> list[int]:
    """The warm parents serving from folders under ``base`` (found by their command line: a parent
    removes its folder when it exits); a zombie (killed, not reaped yet by init) is gone. Its forked
    children carry its command line too: a process whose parent matches is a child."""
    found: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            mine = b"mlrepro.runs.warm" in cmdline and any(arg.startswith(str(base).encode()) for arg in cmdline)
            if mine and stat[0] != "Z":
                found[int(proc.name)] = int(stat[1])
        except (OSError, ValueError, IndexError):
            continue
    return [pid for pid, ppid in found.items() if ppid not in found]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _parent_folder(pid: int) -> Path:
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return Path(cmdline[cmdline.index("--dir") + 1])


def _stop_parents(base: Path) -> None:
    for pid in _parents_alive(base):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """resnet's generated data and launch file, made by the real workflow."""
    wd = tmp_path_factory.mktemp("warm")
    (wd / "config.yaml").write_text(CONFIG)
    # the launch file and the data, each by its job (rules/runs.smk, rules/data.smk)
    snakemake(wd, "--configfile", str(wd / "config.yaml"), "--", "results/data/resnet/MANIFEST.sha256",
              f"results/runs/{SYSTEM}/resnet/launch.json")
    assert (wd / "results" / "runs" / SYSTEM / "resnet" / "launch.json").is_file()
    return wd


@pytest.fixture
def warm_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Short, directly under /tmp: a Unix socket's path holds at most 107 bytes, and pytest's own
    # temporary folders (/tmp/pytest-of-root/pytest-N/<test name>/...) leave too few of them.
    base = Path(tempfile.mkdtemp(prefix="mlw-", dir="/tmp"))
    monkeypatch.setenv(warm.DIR_ENV, str(base))
    try:
        yield base
    finally:
        _stop_parents(base)
        shutil.rmtree(base, ignore_errors=True)


def _events(result: Path) -> list[dict[str, object]]:
    events = []
    for line in result.read_text().splitlines():
        event = json.loads(line.split(":::MLLOG ", 1)[1])
        del event["time_ms"]
        events.append(event)
    return events


def _run_job(workdir: Path, run_dir: str, env: dict[str, str]) -> tuple[dict[str, object], int]:
    """The run's record and the pid of the process started here."""
    proc = subprocess.Popen([sys.executable, "-m", "mlrepro.runs.driver", "--launch",
                             f"results/runs/{SYSTEM}/resnet/launch.json",
                             "--seed", "11", "--run-dir", run_dir, "--gpu-locks", "results/.gpu_locks",
                             "--telemetry-hz", "20"], cwd=workdir, env=env)
    assert proc.wait(timeout=300) == 0
    return json.loads((workdir / run_dir / "run.json").read_text()), proc.pid


def _driver_pid(run_dir: Path) -> int:
    """The pid the ledger's launch line records: the process that ran the driver."""
    return int(json.loads((run_dir / ledger.LEDGER).read_text().splitlines()[0])["pid"])


@pytest.mark.integration
def test_warm_run_equals_cold_run_and_sampler_window(workdir: Path, warm_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != warm.OWNER_ENV}
    cold, started = _run_job(workdir, "cold", env)
    assert _driver_pid(workdir / "cold") == started  # the driver ran in the process started here
    assert not (workdir / "cold" / "telemetry" / "container.pids").exists()  # the trainer was the driver's child
    owner = warm.owner_here()
    hot, started = _run_job(workdir, "warm", {**env, warm.OWNER_ENV: owner})
    # it went warm: the trainer was the training parent's child, and the shim told the sampler its pid;
    # the driver ran in the process started here (it has no warm parent: issue 46), the only parent is training's
    parent = int((warm.parent_dir(owner) / "parent.pid").read_text())
    trainer = int((workdir / "warm" / "telemetry" / "container.pids").read_text().split()[-1])
    assert trainer != parent
    assert _parents_alive(warm_dir) == [parent]
    assert _driver_pid(workdir / "warm") == started
    # same seed, same events (every MLLOG key, value and metadata), epochs and metric curve
    assert _events(workdir / "warm" / "result.txt") == _events(workdir / "cold" / "result.txt")
    for key in ("seed", "epochs", "status", "final_metric", "benchmark", "implementation"):
        assert hot[key] == cold[key], key
    assert [m["value"] for m in hot["metrics"]] == [m["value"] for m in cold["metrics"]]  # type: ignore[index]
    # the sampler's window is the run's run_start..run_stop, and it measured the forked trainer
    for record in (cold, hot):
        telemetry = record["telemetry"]
        assert isinstance(telemetry, dict)
        assert telemetry["window"]["run_start_ms"] == record["run_start_ms"]
        assert telemetry["window"]["run_stop_ms"] == record["run_stop_ms"]
        assert telemetry["host"]["samples"] > 0 and telemetry["host"]["mean_proc_cpu_pct"] > 10


@pytest.mark.integration
def test_the_run_rules_job_trains_warm_and_equals_the_cold_one(workdir: Path, warm_dir: Path) -> None:
    """The driver's entry function (mlrepro/runs/driver.py: job), as the run rule's job through rules/dispatch.py:
    run in the job's own process (no parent of its own), its training from the training's warm parent, its run the
    same as one run cold."""
    env = {k: v for k, v in os.environ.items() if k != warm.OWNER_ENV} | {"MLREPRO_WARM_DEBUG": "1"}
    owner = warm.owner_here()
    records = {}
    for mode, extra in (("job-cold", {}), ("job-warm", {warm.OWNER_ENV: owner})):
        run_dir = workdir / mode
        launch = LaunchSpec.read(workdir / "results" / "runs" / SYSTEM / "resnet" / "launch.json")
        job = make_job("run", output={"result": run_dir / "result.txt", "summary": run_dir / "run.json"},
                       params={"launch": launch.to_dict(),
                               "seed": 11, "run_dir": run_dir, "locked": False,
                               "gpu_locks": workdir / "results" / ".gpu_locks", "gpus": "auto", "hz": 20,
                               "backend": "nvml"},
                       wildcards={"system": SYSTEM, "benchmark": "resnet", "run": "0"}, log=workdir / f"{mode}.log")
        proc = dispatch(workdir, job, env=env | extra, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert "cold start" not in (workdir / f"{mode}.log").read_text()
        records[mode] = json.loads((run_dir / "run.json").read_text())
    assert _parents_alive(warm_dir) == [int((warm.parent_dir(owner) / "parent.pid").read_text())]
    assert (workdir / "job-warm" / "telemetry" / "container.pids").is_file()  # the shim told the sampler its trainer
    assert _events(workdir / "job-warm" / "result.txt") == _events(workdir / "job-cold" / "result.txt")
    for key in ("seed", "epochs", "status", "final_metric", "benchmark", "implementation"):
        assert records["job-warm"][key] == records["job-cold"][key], key


@pytest.mark.integration
def test_dataset_job_goes_warm_and_writes_what_the_cold_one_writes(workdir: Path, warm_dir: Path,
                                                                   tmp_path: Path) -> None:
    """The data rule's job, as Snakemake runs it (rules/dispatch.py): handed to the warm parent as a Job."""
    launch = json.loads((workdir / "results" / "runs" / SYSTEM / "resnet" / "launch.json").read_text())
    env = {k: v for k, v in os.environ.items() if k != warm.OWNER_ENV} | {"MLREPRO_WARM_DEBUG": "1"}
    owner = warm.owner_here()
    out = {}
    for mode, extra in (("cold", {}), ("warm", {warm.OWNER_ENV: owner})):
        job = make_job("data", output={"manifest": tmp_path / mode / "MANIFEST.sha256"},
                       params={"folder": tmp_path / mode, "data": {"data": launch["params"]["data"]}, "seed": 7,
                               "receipt": tmp_path / f"{mode}.receipt.json"},
                       wildcards={"benchmark": "resnet"}, log=tmp_path / f"{mode}.log")
        proc = dispatch(tmp_path, job, env=env | extra, timeout=300)
        assert proc.returncode == 0, proc.stderr
        out[mode] = (tmp_path / f"{mode}.log").read_text()
        # with MLREPRO_WARM_DEBUG a job the warm parent could not serve says why it started cold (in its log)
        assert "cold start" not in out[mode], out[mode]
    data_parent = int((warm.parent_dir(owner, warm.DATA) / "parent.pid").read_text())
    assert _parents_alive(warm_dir) == [data_parent]
    assert out["warm"] == out["cold"] and out["cold"].count("  ") >= 2  # the same files, hash for hash
    for path in (tmp_path / "cold").rglob("*"):
        if path.is_file() and path.name != ".receipt.json":
            assert (tmp_path / "warm" / path.relative_to(tmp_path / "cold")).read_bytes() == path.read_bytes()


def _shim(folder: Path) -> Path:
    warm.private(folder)  # the user's own, mode 700, as the driver makes it
    shim = folder / "python"
    shim.write_text(f"#!{sys.executable} -I\nimport sys\nsys.path.insert(0, {str(REPO)!r})\n"
                    "from mlrepro.runs.warm import shim_main\n"
                    f"shim_main({sys.executable!r}, module='tests.warm_counter')\n")
    shim.chmod(0o755)
    return shim


def test_runs_from_one_parent_share_no_state(warm_dir: Path, tmp_path: Path) -> None:
    assert warm.ROOTS_ENV == ROOTS_ENV
    owner = warm.owner_here()
    shim = _shim(warm.parent_dir(owner))
    env = {**os.environ, "PYTHONPATH": str(REPO), warm.OWNER_ENV: owner, "WARM_TEST_MARKER": "x"}
    runs = []
    for seed, cwd in ((1, tmp_path), (2, warm_dir)):
        out = subprocess.run([str(shim), "-m", "tests.warm_counter", str(seed)], env=env, cwd=cwd,
                             capture_output=True, text=True, check=True, timeout=120).stdout
        runs.append(json.loads(out))
    parent = int((shim.parent / "parent.pid").read_text())
    # both forked from the same parent, each a new process that counts itself as its first run
    assert [r["ppid"] for r in runs] == [parent, parent] and runs[0]["pid"] != runs[1]["pid"]
    assert [r["runs"] for r in runs] == [1, 1]
    # each with its own arguments, working folder and environment
    assert [(r["seed"], r["cwd"], r["marker"]) for r in runs] == [(1, str(tmp_path), "x"), (2, str(warm_dir), "x")]
    # an interpreter setting the parent started without: the run goes cold (the real interpreter)
    out = subprocess.run([str(shim), "-m", "tests.warm_counter", "3"], env={**env, "PYTHONHASHSEED": "123"},
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert json.loads(out)["ppid"] != parent
    # the parent ends with its owner
    owner_proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        other = f"{owner.split(':')[0]}:{owner_proc.pid}:{warm._start_time(owner_proc.pid)}"
        shim2 = _shim(warm.parent_dir(other))
        subprocess.run([str(shim2), "-m", "tests.warm_counter", "4"], env={**env, warm.OWNER_ENV: other},
                       capture_output=True, check=True, timeout=120)
        parent2 = int((shim2.parent / "parent.pid").read_text())
        assert parent2 in _parents_alive(warm_dir)
    finally:
        owner_proc.kill()
        owner_proc.wait()
    deadline = time.monotonic() + 15
    while parent2 in _parents_alive(warm_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert parent2 not in _parents_alive(warm_dir)


def test_a_silent_connection_does_not_hold_up_later_runs(warm_dir: Path) -> None:
    """A shim stopped between connecting and sending its request: the parent drops it after
    REQUEST_TIMEOUT_S and serves the next run from the same parent (it used to wait for ever)."""
    import socket

    owner = warm.owner_here()
    shim = _shim(warm.parent_dir(owner))
    env = {**os.environ, "PYTHONPATH": str(REPO), warm.OWNER_ENV: owner, "WARM_TEST_MARKER": "x"}
    first = subprocess.run([str(shim), "-m", "tests.warm_counter", "1"], env=env, capture_output=True, text=True,
                           check=True, timeout=120).stdout
    parent = int((shim.parent / "parent.pid").read_text())
    assert json.loads(first)["ppid"] == parent
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(str(shim.parent / "parent.sock"))  # and never sends
    try:
        started = time.monotonic()
        out = subprocess.run([str(shim), "-m", "tests.warm_counter", "2"], env=env, capture_output=True, text=True,
                             check=True, timeout=warm.REQUEST_TIMEOUT_S + 60).stdout
        assert json.loads(out)["ppid"] == parent  # served warm, by the same parent, after the silent one
        assert time.monotonic() - started >= warm.REQUEST_TIMEOUT_S * 0.9
        assert silent.recv(1) == b""  # the parent closed the silent connection
    finally:
        silent.close()


@pytest.mark.integration
def test_killed_parent_leaves_no_result_and_next_invocation_redoes_the_run(workdir: Path, warm_dir: Path) -> None:
    run = workdir / "results" / "runs" / SYSTEM / "resnet" / "1"
    args = [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), "--cores", "2",
            "--configfile", str(workdir / "config.yaml"), "--", f"results/runs/{SYSTEM}/resnet/1/result.txt"]
    env = {k: v for k, v in os.environ.items() if k != warm.OWNER_ENV}
    first = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        while not ((run / "train.log").is_file() and "run_start" in (run / "train.log").read_text()):
            assert first.poll() is None and time.monotonic() < deadline, first.stdout and first.stdout.read()
            time.sleep(0.05)
        (parent,) = _parents_alive(warm_dir)  # the training's (the run driver has none: issue 46)
        assert (_parent_folder(parent) / "python").is_file()  # its folder holds the shim
        os.kill(parent, signal.SIGKILL)  # mid-run
        output, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode != 0, output
    assert not (run / "result.txt").exists() and not (run / "run.json").exists()
    assert "ended without an exit status" in (run / "train.log").read_text()
    # nothing of the killed run goes on: its trainer, the process that would write them, ends with it
    pids = run / "telemetry" / "container.pids"  # the trainer's pid, which the shim told the sampler
    trainer = int(pids.read_text().split()[-1])
    deadline = time.monotonic() + 30
    while _alive(trainer) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(trainer), f"the killed run's trainer {trainer} goes on"
    assert not (run / "result.txt").exists() and not (run / "checkpoint.pt").exists()
    snakemake(workdir, "--configfile", str(workdir / "config.yaml"), "--",
              f"results/runs/{SYSTEM}/resnet/1/result.txt")
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "success" and (run / "result.txt").is_file()
    # the second invocation's parent went with it (it polls its owner twice a second): no stray process
    deadline = time.monotonic() + 15
    while _parents_alive(warm_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _parents_alive(warm_dir) == []
