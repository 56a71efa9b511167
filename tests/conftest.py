"""Shared fixtures: the repository, a Snakemake runner, the pipeline trees the integration tier shares (each run once
per session), and a writer of MLPerf logs.

Two tiers (README, "Tests"): plain ``pytest`` runs the fast tier, units that run no pipeline;
``pytest -m integration`` runs the tests marked ``integration``: real Snakemake runs, trainings to
convergence and the tests that need CI's services (Podman, Slurm). A test in the fast tier that calls
:func:`snakemake` fails, naming the mark it lacks.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from mlrepro import planning
from mlrepro.config import system_name
from mlrepro.core.job import Files, Job, json_values
from mlrepro.planning import PlanningError
from mlrepro.planning.plan import Plan
from mlrepro.planning.prepare import Preparation
from mlrepro.runs import capture_job
from mlrepro.runs.launch_spec import LaunchSpec
from tests.rounds import releases, v11_checks, v11_round, v11_summary  # noqa: F401  (tests/rounds.py)

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
TEST_CONFIG = REPO / "config" / "test.yaml"
# The one system of a configuration without systems: (system: auto), whose folder holds the runs: runs/<SYSTEM>/...
SYSTEM = system_name("auto")
# Marks of tests that need what a developer's machine may lack (CI's services, a GPU): integration tier.
RESOURCE_MARKS = ("podman", "slurm", "gpu")
# Fixtures that run the pipeline: a test using one belongs to the integration tier.
PIPELINE_FIXTURES = ("tiny_pipeline", "tiny_package", "tiny_pipeline_copy", "v61_suite")

_running: list[pytest.Item] = []  # the test being run (its fixtures' setup included)


@pytest.hookimpl(tryfirst=True)  # before -m selects the tier
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(m) for m in RESOURCE_MARKS) or set(PIPELINE_FIXTURES) & set(
                getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


def _cpu_s() -> float:
    """CPU seconds of this process and of the processes it has waited for (their own waited-for ones included)."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


_cpu_by_file: dict[str, float] = {}  # a test file -> the CPU seconds its tests took (setup and teardown included)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Any:
    _running.append(item)
    started = _cpu_s()
    try:
        yield
    finally:
        _running.pop()
        name = item.nodeid.split("::", 1)[0]
        _cpu_by_file[name] = _cpu_s() - started + _cpu_by_file.get(name, 0.0)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The session's CPU time, and its files' (the 15 costliest): CI's sessions share two cores, where wall times
    say more about the other sessions' load than about a file's own cost (.ci/run balances its sessions by CPU).
    A process a test did not wait for (a daemon, a detached run) is not counted."""
    if not _cpu_by_file:
        return
    costliest = sorted(_cpu_by_file.items(), key=lambda kv: -kv[1])[:15]
    terminalreporter.write_sep("=", f"CPU time: {_cpu_s():.0f} s in all; the costliest files")
    for name, seconds in costliest:
        terminalreporter.write_line(f"{seconds:8.1f}s {name}")


def require(available: bool, message: str) -> None:
    """Skip a test whose tool, service or data is absent here; under CI (CI=true, set by .ci/run, which
    provides them all) fail instead, so that nothing CI must test is skipped there."""
    if not available:
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def repo() -> Path:
    return REPO


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    """Run the repository's real Snakefile with ``workdir`` as its working directory (integration tier only)."""
    if _running and _running[-1].get_closest_marker("integration") is None:
        raise AssertionError(f"{_running[-1].nodeid} runs Snakemake: mark it `integration` (pytest.mark.integration); "
                             "the fast tier runs no pipeline")
    proc = subprocess.run(
        [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), "--cores", "2", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}"
                             f"\n{proc.stderr[-8000:]}")
    return proc


def plan_config(workdir: Path, *configs: dict[str, Any]) -> tuple[Plan, Preparation]:
    """What the Snakefile's planning step does before any job, in this process: config/config.yaml updated with
    ``configs`` in turn (as Snakemake merges --configfile and --config), planned in ``workdir`` by
    ``mlrepro.planning.start``, then the checks that run while the DAG is built (``Preparation.check``). Returns the
    plan and its preparation; a refusal raises ``PlanningError``, which Snakemake prints without a traceback
    (tests/test_planning.py checks one through Snakemake). For a test that only checks a refusal: no Snakemake
    process (seconds each). The environment variables planning sets are restored."""
    def update(into: dict[str, Any], overwrite: dict[str, Any]) -> dict[str, Any]:  # as Snakemake merges configs
        for key, value in overwrite.items():
            base = into.get(key)
            into[key] = update(base if isinstance(base, dict) else {}, value) if isinstance(value, dict) else value
        return into

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for overwrite in configs:
        update(config, overwrite)
    environ, cwd = dict(os.environ), os.getcwd()
    os.chdir(workdir)
    try:
        plan, prepare = planning.start(SimpleNamespace(basedir=str(REPO)), config)
        prepare.check()
        return plan, prepare
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)


def make_job(rule: str, input: dict[str, Any] | None = None, output: dict[str, Any] | None = None,
             params: dict[str, Any] | None = None, wildcards: dict[str, str] | None = None, threads: int = 1,
             log: Path | None = None) -> Job:
    """A rule's Job as mlrepro/jobs.py makes it from Snakemake's object: named files (a path or a list of them),
    params as JSON values."""

    def files(named: dict[str, Any] | None) -> Files:
        named = {k: (str(v) if isinstance(v, str | Path) else [str(p) for p in v]) for k, v in (named or {}).items()}
        return Files(tuple(p for v in named.values() for p in ([v] if isinstance(v, str) else v)), named)

    return Job(rule, files(input), files(output), json_values(params or {}), wildcards or {}, threads,
               str(log) if log else None)


def launch_preview(plan: Plan, out: Path) -> str:
    """The launch_preview rule's job (mlrepro/runs/preview.py: job) on ``plan``'s units, in this process: what it
    prints (the node-hours table)."""
    from mlrepro.runs import preview

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        preview.job(make_job("launch_preview", output={"out": out}, params={"units": plan.preview_units()}))
    return printed.getvalue()


def run_job(job: Job, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``python -m mlrepro.jobs < JOB``: the job in a process of its own (LoadGen's rule: one run per process)."""
    return subprocess.run([sys.executable, "-P", "-m", "mlrepro.jobs"], input=job.to_json(), cwd=REPO,
                          capture_output=True, text=True, check=False, **kwargs)


# What Snakemake's script: directive runs (snakemake/script/__init__.py, PythonScript): the script's text after a
# preamble that extends sys.path with the main process's path and defines ``snakemake``, written to
# .snakemake/scripts/ in the working folder and run by the interpreter that runs Snakemake. The stand-in object has
# what mlrepro/jobs.py reads of the real one: named lists with items(), the rule, threads and log.
_SCRIPT = """import sys
sys.path.extend({path!r})


class _Named(list):
    def __init__(self, named):
        super().__init__(p for v in named.values() for p in (v if isinstance(v, list) else [v]))
        self._named = named

    def items(self):
        return iter(self._named.items())


class _Snakemake:
    rule = {rule!r}
    input, output = _Named({input!r}), _Named({output!r})
    params, wildcards = _Named({params!r}), _Named({wildcards!r})
    threads, log = {threads!r}, {log!r}


snakemake = _Snakemake()
__real_file__ = __file__
__file__ = {dispatcher!r}
"""


def dispatch(workdir: Path, job: Job, extra_path: list[str] | None = None, **kwargs: Any
             ) -> subprocess.CompletedProcess[str]:
    """Run ``job`` through rules/dispatch.py as Snakemake's script: directive runs it, in ``workdir`` (its path
    extended as Snakemake extends it: with the main process's, and ``extra_path``)."""
    scripts = workdir / ".snakemake" / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    script = scripts / "tmpjob.dispatch.py"
    script.write_text(_SCRIPT.format(
        path=[p for p in sys.path if p and p != str(REPO)] + [str(REPO), *(extra_path or [])], rule=job.rule,
        input=job.input.named, output=job.output.named, params=job.params, wildcards=job.wildcards,
        threads=job.threads, log=[job.log] if job.log else [], dispatcher=str(REPO / "rules" / "dispatch.py"))
        + (REPO / "rules" / "dispatch.py").read_text())
    return subprocess.run([sys.executable, str(script)], cwd=workdir, capture_output=True, text=True, check=False,
                          **kwargs)


def refused(proc: subprocess.CompletedProcess[str], *says: str) -> str:
    """``proc`` (a Snakemake run) stopped before its jobs with a clear message: a non-zero exit status, each of
    ``says`` in what it printed, and no traceback (a refusal names the key or file and what to do; it is not a
    crash). Snakemake prints a parse error on stdout, the rest on stderr: the two together, returned."""
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"not refused:\n{text[-4000:]}"
    for said in says:
        assert said in text, f"{said!r} not said:\n{text[-4000:]}"
    assert "Traceback" not in text, f"a refusal with a traceback:\n{text[-4000:]}"
    return text


def refused_by_planning(workdir: Path, *configs: dict[str, Any], says: tuple[str, ...]) -> str:
    """What ``refused`` checks of a Snakemake run, for the next start's planning in this process (``plan_config``):
    it refuses with a ``PlanningError``, saying each of ``says``; its message. Snakemake prints one without a
    traceback and runs no job (tests/test_planning.py checks that through Snakemake)."""
    with pytest.raises(PlanningError) as refusal:
        plan_config(workdir, *configs)
    text = str(refusal.value)
    for said in says:
        assert said in text, f"{said!r} not said:\n{text}"
    return text


def captured(plan: Plan) -> Plan:
    """``plan`` with each of its config files captured as its capture job does it (rules/runs.smk ``capture``: the
    config file sourced, each unit that reads it checked, the record written under the plan's outdir), for the tests
    that build a plan without Snakemake."""
    for key in sorted(set(plan.captures.keys.values())):
        capture_job.capture(plan.capture_source(key), plan.out.capture(key), plan.capture_checks(key),
                            runs=plan.capture_runs(key))
    return plan


def write_mllog(path: Path, benchmark: str, run_start_ms: int, minutes: float, status: str = "success",
                seed: int = 1, extra: list[dict[str, Any]] | None = None, division: str = "open") -> Path:
    """A result file the open-division compliance checker accepts, with a chosen time to train."""
    stop = run_start_ms + round(minutes * 60_000)
    accuracy: Any = {"BBOX": 0.5, "SEGM": 0.4} if benchmark == "maskrcnn" else 0.5
    events = [
        ("POINT_IN_TIME", "cache_clear", True, {}, run_start_ms - 5000),
        ("INTERVAL_START", "init_start", None, {}, run_start_ms - 4000),
        ("POINT_IN_TIME", "submission_benchmark", benchmark, {}, run_start_ms - 3900),
        ("POINT_IN_TIME", "submission_org", "testorg", {}, run_start_ms - 3900),
        ("POINT_IN_TIME", "submission_platform", "testsystem", {}, run_start_ms - 3900),
        ("POINT_IN_TIME", "submission_division", division, {}, run_start_ms - 3900),
        ("POINT_IN_TIME", "submission_status", "research", {}, run_start_ms - 3900),
        ("POINT_IN_TIME", "seed", seed, {}, run_start_ms - 3900),
        ("POINT_IN_TIME", "train_samples", 100, {}, run_start_ms - 3000),
        ("POINT_IN_TIME", "eval_samples", 10, {}, run_start_ms - 3000),
        ("INTERVAL_END", "init_stop", None, {}, run_start_ms - 1),
        ("INTERVAL_START", "run_start", None, {}, run_start_ms),
        ("INTERVAL_START", "epoch_start", None, {"epoch_num": 1}, run_start_ms + 1),
        ("INTERVAL_END", "epoch_stop", None, {"epoch_num": 1}, stop - 3),
        ("INTERVAL_START", "eval_start", None, {"epoch_num": 1}, stop - 2),
        ("POINT_IN_TIME", "eval_accuracy", accuracy, {"epoch_num": 1}, stop - 1),
        ("INTERVAL_END", "eval_stop", None, {"epoch_num": 1}, stop - 1),
        ("INTERVAL_END", "run_stop", None, {"status": status}, stop),
    ]
    lines = [{"namespace": "", "time_ms": t, "event_type": et, "key": k, "value": v,
              "metadata": {"file": "test.py", "lineno": 1, **md}} for et, k, v, md, t in events]
    lines.extend(extra or [])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f":::MLLOG {json.dumps(line)}\n" for line in lines))
    return path


@pytest.fixture
def mllog() -> Callable[..., Path]:
    return write_mllog


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test configuration (config/test.yaml: five ResNet runs and their inference) run once through every
    stage, for the whole session; its working folder. Tests only read it: one that changes it, or runs
    Snakemake in it to change something, takes ``tiny_pipeline_copy``."""
    workdir = tmp_path_factory.mktemp("tiny_pipeline")
    snakemake(workdir, "--configfile", str(TEST_CONFIG))
    return workdir


@pytest.fixture(scope="session")
def tiny_package(tiny_pipeline: Path) -> Path:
    """The shared run's output folder (``results/``)."""
    return tiny_pipeline / "results"


@pytest.fixture
def tiny_pipeline_copy(tiny_pipeline: Path, tmp_path: Path) -> Path:
    """A private copy of the shared run's working folder, Snakemake's records and modification times
    included, so that Snakemake sees it finished as the original is."""
    return Path(shutil.copytree(tiny_pipeline, tmp_path / "pipeline", symlinks=True))


# The part of config/v6.1.yaml that CI runs through every stage: the GRPO mini (its data step trains its base)
V61_SUITE = ("qwen35_397b_grpo",)


@pytest.fixture(scope="session")
def v61_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """config/v6.1.yaml run once through every stage, for the whole session: V61_SUITE's benchmarks
    (``MLREPRO_V61_SUITE=all``: the whole file, 43 runs); its output folder (``results-v6.1/``). Tests only read it
    (tests/test_v61_suite.py judges it; tests/test_v61_minis.py takes the converged runs of its minis from it)."""
    workdir = tmp_path_factory.mktemp("v61_suite")
    only = [] if os.environ.get("MLREPRO_V61_SUITE") == "all" else ["--config", f"only=[{','.join(V61_SUITE)}]"]
    snakemake(workdir, "--configfile", str(REPO / "config" / "v6.1.yaml"), *only)
    return workdir / "results-v6.1"


NVIDIA_V11 = REPO.parent / "shared" / "data" / "mlperf_training_nvidia_implementations_v1.1.tar.xz"


@pytest.fixture(scope="session")
def nvidia_benchmarks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NVIDIA's eight v1.1 implementation folders (``<benchmark>/implementations/<impl>/``), unpacked once."""
    require(NVIDIA_V11.is_file(), f"{NVIDIA_V11} is absent")
    import tarfile

    out = tmp_path_factory.mktemp("nvidia_v1.1")
    with tarfile.open(NVIDIA_V11) as tar:
        tar.extractall(out, filter="data")
    return out / "NVIDIA" / "benchmarks"


def mini_launch(benchmark: str, params: dict[str, Any], data_dir: Path, tmp: Path,
                tasks_per_node: int = 1, nodes: int = 1, drop_caches: bool = False) -> list[str]:
    """The run driver's arguments for one of our mini implementations, with the launch file the run rule
    (rules/runs.smk) would write: the folder minis/<benchmark>/ run through its run_and_time.sh."""
    path = tmp / f"launch_{benchmark}_{nodes}x{tasks_per_node}.json"
    LaunchSpec(benchmark=benchmark, kind="mini", name="mini", folder=str(REPO / "minis" / benchmark),
               config_file="config_CPU.sh", env={"DGXSYSTEM": "CPU", "DGXNNODES": "1", "DGXNGPU": "0"},
               params=params, data_dir=str(data_dir), gpus=0, threads=1, device="cpu", nodes=nodes,
               tasks_per_node=tasks_per_node, drop_caches=drop_caches,
               submission={"org": "t", "platform": "p", "division": "open", "status": "research"}).write(path)
    return ["-m", "mlrepro.runs.driver", "--launch", str(path), "--gpu-locks", str(tmp / "gpu_locks")]
