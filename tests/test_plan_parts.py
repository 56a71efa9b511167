"""Planning's parts (mlrepro/planning/): each small, pure (a configuration is planned with no file written and no
process started), and what the run stage's rules read of ``PLAN`` given alike by the pipeline's plan and by a
reproduction's (mlrepro/reproduce/run_stage.py), so that the two cannot drift."""

from __future__ import annotations

import _posixsubprocess
import ast
import builtins
import io
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlrepro.planning.plan import Plan
from mlrepro.reproduce.run_stage import ReproducedRuns
from tests.conftest import plan_config
from tests.test_reproduce_units import _package, _plan

REPO = Path(__file__).resolve().parents[1]
MAX_CLASS_LINES = 300


def test_no_class_in_mlrepro_is_over_300_lines() -> None:
    """A class is small enough to hold in one's head: none of mlrepro/ over 300 lines (its decorators included)."""
    sizes = {}
    for path in sorted((REPO / "mlrepro").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                sizes[f"{path.relative_to(REPO)}:{node.lineno} class {node.name}"] = node.end_lineno - start + 1
    assert sizes, "no class found: the walk looks in the wrong place"
    over = {name: n for name, n in sizes.items() if n > MAX_CLASS_LINES}
    assert not over, f"classes over {MAX_CLASS_LINES} lines (split them by what they decide): {over}"


# --- purity: planning writes nothing and starts nothing

class SideEffect(BaseException):
    """Raised where planning would write or start a process: a BaseException, which no ``except Exception`` hides."""


WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
MUTATORS = ("mkdir", "makedirs", "rename", "renames", "replace", "remove", "unlink", "rmdir", "removedirs", "symlink",
            "link", "chmod", "chown", "utime", "truncate", "mkfifo", "mknod")
SPAWNERS = ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp", "execvpe",
            "spawnv", "spawnve", "spawnvp", "spawnvpe", "popen")


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


@contextmanager
def no_side_effects(monkeypatch: pytest.MonkeyPatch, home: Path) -> Iterator[list[str]]:
    """Every write (open for writing, os.open with a write flag, a file or folder made, moved or removed) and every
    process started (fork, exec, spawn, subprocess's fork_exec) is recorded and refused (:class:`SideEffect`), with
    HOME, the caches and the working folder in ``home``; on leaving, nothing there has changed. Yields the record."""
    seen: list[str] = []

    def refuse(what: str) -> SideEffect:
        seen.append(what)
        return SideEffect(what)

    real_open, real_os_open = builtins.open, os.open

    def guarded_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+"):
            raise refuse(f"open({file!r}, {mode!r})")
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & WRITE_FLAGS:
            raise refuse(f"os.open({path!r}, {flags:#o})")
        return real_os_open(path, flags, *args, **kwargs)

    def refusing(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise refuse(f"{name}{args!r}")
        return call

    for module in (builtins, io):
        monkeypatch.setattr(module, "open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)
    for name in MUTATORS + SPAWNERS:
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refusing(f"os.{name}"))
    monkeypatch.setattr(_posixsubprocess, "fork_exec", refusing("fork_exec"))
    monkeypatch.setattr(subprocess, "_fork_exec", refusing("subprocess"), raising=False)  # its own name for it
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refusing("subprocess.Popen"))
    for name in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "TMPDIR"):
        monkeypatch.setenv(name, str(home / name.lower()) if name != "HOME" else str(home))
    before = _files(home)
    try:
        yield seen
    finally:
        monkeypatch.undo()
    assert _files(home) == before, "planning changed files under HOME or the working folder"


def test_the_guard_sees_writes_and_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard is a real check: each kind of side effect it refuses is refused."""
    attempts = [lambda: (tmp_path / "f").write_text("x"), lambda: (tmp_path / "d").mkdir(),
                lambda: (tmp_path / "t").touch(), lambda: subprocess.run(["true"], check=False),
                lambda: os.system("true"), lambda: open(tmp_path / "g", "a")]  # noqa: SIM115
    with no_side_effects(monkeypatch, tmp_path) as seen:
        for attempt in attempts:
            with pytest.raises(SideEffect):
                attempt()
        assert (REPO / "config" / "config.yaml").read_text()  # reading is planning's right
    assert len(seen) == len(attempts) and not list(tmp_path.iterdir())


def _every_value(plan: Plan) -> int:
    """What the rule files ask of the plan while the DAG is built (paths, params, rerun keys, resources, inputs);
    values made of a config file's capture raise FileNotFoundError until its job has run. Returns how many values."""
    values: list[Any] = [plan.out.report, plan.launch_files, plan.inference_targets, plan.image_records, plan.images,
                         plan.release_stamps, plan.logging_release, plan.result_files, plan.kept_runs,
                         plan.capture_files, plan.capture_pattern, plan.system_pattern, plan.sqsh_names,
                         plan.environment_spec, plan.run_resources(), plan.run_shapes, plan.telemetry_hz,
                         plan.rerun.basis(lambda p: p.package_spec()), plan.rerun.basis(lambda p: p.report_spec()),
                         plan.all_runs(plan.out.verdict), plan.inference_scenarios, plan.data_resources("generate")]
    for s, b in plan.ordered_units:
        values += [plan.rerun.launch_digest(s, b), plan.rerun.basis(lambda p, s=s, b=b: p.launch_params(s, b)),
                   plan.run_seed(b, 0), plan.capture_file(s, b), plan.image_record(b, s), plan.sqsh_record(s, b),
                   plan.dataset_ready(b), plan.dataset_receipts(b), plan.recipe_file(b)]
        for value in (plan.launch_params, plan.scheduled_gpus):
            with pytest.raises(FileNotFoundError):  # the capture job writes the record the value is made of
                value(s, b)
    for key in set(plan.captures.keys.values()):
        values += [plan.capture_source(key), plan.capture_checks(key), plan.capture_runs(key),
                   plan.capture_preflight(key), plan.capture_inputs(key)]
    for image in plan.images:
        values += [plan.container_inputs(image), plan.rerun.build_context(image), plan.image_folder(image)]
    values += [plan.data_spec(b) for b in plan.mini_benchmarks]
    values += [plan.inference_spec(b) for b in plan.inference_benchmarks]
    return len(values)


@pytest.mark.parametrize("configs", [(), ("config/test.yaml",)], ids=["embedded default", "test config"])
def test_planning_writes_nothing_and_starts_nothing(configs: tuple[str, ...], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The Snakefile's planning step and every value the rules read while the DAG is built, in this process, with
    writing and process starts refused: nothing is refused, and nothing changes under HOME or the working folder."""
    overrides = [yaml.safe_load((REPO / c).read_text()) for c in configs]
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)  # where the rules are evaluated: the outdir's relative paths read from there
    with no_side_effects(monkeypatch, tmp_path) as seen:
        plan, prepare = plan_config(workdir, *overrides)
        count = _every_value(plan)
        assert prepare.again() == []  # nothing finished to make again: a fresh folder
    assert not seen, f"planning wrote or started: {seen}"
    assert plan.ordered_units and count > 20 + 9 * len(plan.ordered_units)


# --- the run stage's rules read the same names of both plans

SHARED_RULES = ("rules/runs.smk", "rules/compliance.smk")


def _names_read(text: str, of: str) -> set[tuple[str, ...]]:
    """Each ``<of>.a`` or ``<of>.a.b`` the text reads, as ("a",) or ("a", "b")."""
    return {tuple(n for n in m.groups() if n) for m in re.finditer(rf"\b{of}\.(\w+)(?:\.(\w+))?", text)}


def _kind(owner: Any, name: str) -> str:
    """A method or a value (attribute, property): how a rule file uses it."""
    found = getattr(type(owner), name, None)
    return "method" if callable(found) and not isinstance(found, type) else "value"


def test_the_run_stage_rules_read_names_both_plans_give(tmp_path: Path) -> None:
    """Every ``PLAN.<name>`` (and ``PLAN.<part>.<name>``) of the shared rule files, every ``plan.<name>`` of the
    lambdas they hand to the rerun keys and of the input functions they call (mlrepro/planning/inputs.py): given by
    the pipeline's plan and by a reproduction's, as the same kind (method or value)."""
    text = "\n".join((REPO / f).read_text() for f in SHARED_RULES)
    read = _names_read(text, "PLAN") | _names_read(text, "plan")
    inputs = ast.parse((REPO / "mlrepro" / "planning" / "inputs.py").read_text())
    read |= {(n.attr,) for n in ast.walk(inputs)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "plan"}
    assert {("rerun", "launch_digest"), ("launch_params",), ("capture_file",), ("out", "result")} <= read
    pipeline, _ = plan_config(tmp_path, yaml.safe_load((REPO / "config" / "test.yaml").read_text()))
    # as rules/reproduce.smk makes it: the user's config, the release the pipeline's plan finds
    reproduction = ReproducedRuns.for_reproduction(_plan(_package(tmp_path / "package")), pipeline.config,
                                                   tmp_path / "reproduction", pipeline.logging_release,
                                                   pipeline.release_stamps)
    missing = []
    for names in sorted(read):
        kinds = {}
        for plan in (pipeline, reproduction):
            owner: Any = plan
            for name in names[:-1]:
                owner = getattr(owner, name, None)
            if owner is None or not hasattr(owner, names[-1]):
                missing.append(f"{type(plan).__name__} has no {'.'.join(names)}")
            else:
                kinds[type(plan).__name__] = _kind(owner, names[-1])
        if len(set(kinds.values())) > 1:
            missing.append(f"{'.'.join(names)} is not the same kind: {kinds}")
    assert not missing, "the shared run rules read names a plan does not give: " + "; ".join(missing)


PLACEHOLDER = re.compile(r"<[^<>\s]*>|\bTBD\b")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def test_a_plan_holds_no_placeholder_an_image_still_to_build_is_none(tmp_path: Path) -> None:
    """A vendor folder with run.sub whose image is built from its Dockerfile: what the capture job runs run.sub with
    says so by ``cont: None`` (the job names it), not by a made-up image name; the capture job takes it."""
    from tests.conftest import captured
    from tests.test_vendor_launch import _config, _folder, _uncaptured

    (_folder(tmp_path) / "Dockerfile").write_text("FROM nvcr.io/nvidia/pytorch:24.09-py3\n")
    raw = _config(tmp_path, {"EXTRADIR": "/x"})
    del raw["benchmarks"]["resnet"]["image"]
    raw["engine"] = "podman"
    plan = _uncaptured(raw, tmp_path)
    keys = sorted(set(plan.captures.keys.values()))
    planned = [plan.capture_runs(k) for k in keys] + [plan.capture_checks(k) for k in keys]
    assert planned[0] and all(run["cont"] is None for run in planned[0])
    assert not [s for s in _strings(planned) if PLACEHOLDER.search(s)]
    captured(plan)  # the capture job: run.sub traced with the image it would build as CONT
    assert plan.launches.spec("sim_n1", "resnet").container is None and plan.launch_params("sim_n1", "resnet")


def _tracked(plan: Plan) -> dict[str, Any]:
    """What the rules track of each unit's runs and of the package and the report (mlrepro/planning/rerun_keys.py)."""
    units = {f"{s}/{b}": (plan.rerun.launch_digest(s, b), plan.rerun.basis(lambda p, s=s, b=b: p.launch_params(s, b)))
             for s, b in plan.ordered_units}
    return {**units, "package": plan.rerun.basis(lambda p: p.package_spec()),
            "report": plan.rerun.basis(lambda p: p.report_spec())}


def test_rerun_keys_change_with_what_a_run_computes_from_and_not_with_its_capture(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process, what Snakemake's rerun decisions rest on: the tracked keys are the same before and after the capture
    jobs write their records (else every run would run again at the next invocation); a hyperparameter changes its
    benchmark's run key only; the number of runs (a pipeline key) changes none."""
    from tests.conftest import captured

    monkeypatch.chdir(tmp_path)  # the capture jobs write under the relative outdir: here
    config = {"only": ["resnet", "dlrm"], "allow_fewer_runs": True, "inference": {"benchmarks": []},
              "benchmarks": {"resnet": {"runs": 1}, "dlrm": {"runs": 1}}}
    before = _tracked(plan_config(tmp_path, config)[0])
    plan = captured(plan_config(tmp_path, config)[0])
    after = plan_config(tmp_path, config)[0]
    assert _tracked(after) == before and after.launch_params(*after.ordered_units[0])  # now known, its key unchanged
    changed = _tracked(plan_config(tmp_path, config, {"benchmarks": {"resnet": {"lr": 0.05}}})[0])
    resnet, dlrm = (f"{plan.system}/{b}" for b in ("resnet", "dlrm"))
    assert changed[resnet][0] != before[resnet][0] and changed[dlrm] == before[dlrm]
    more = _tracked(plan_config(tmp_path, config, {"benchmarks": {"resnet": {"runs": 2}}})[0])
    assert more[resnet][0] == before[resnet][0] and more[dlrm] == before[dlrm]
