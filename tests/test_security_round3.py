"""Security, round 3 (issue 36): a shared cluster login node. Another local user (made here with useradd where
the tests run as root, removed after) cannot run code as you, poison your data or stop your audit; no number
that is not finite ranks; a config is data unless you allow templates; the ledger and logs fail loudly.

Each case is one the round found on 88bb1f7; each test fails there and passes here.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mlrepro import config as mlconfig
from mlrepro.inference import audit as iaudit
from mlrepro.runs import ledger, warm
from tests.conftest import REPO, dispatch, make_job, write_mllog

# --- a second local user -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def other_user() -> Iterator[tuple[str, int, int]]:
    """(name, uid, gid) of a local user made for these tests and removed after them."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("making a second local user needs root and useradd (CI runs as root)")
    name = f"mlr{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"useradd could not make a user here: {made.stderr.strip()}")
    import pwd

    entry = pwd.getpwnam(name)
    try:
        yield name, entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)


def _give(path: Path, user: tuple[str, int, int], mode: int | None = None) -> None:
    """``path`` as if the other user had made it (root stands in for them: chown)."""
    os.lchown(path, user[1], user[2])
    if mode is not None:
        path.chmod(mode)


# --- 1. per-user runtime state: the warm start's folder -------------------------------------------------------


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private XDG_RUNTIME_DIR (short: a Unix socket's path holds 107 bytes), no MLREPRO_WARM_DIR, and this
    process as the warm start's owner."""
    base = Path(tempfile.mkdtemp(prefix="mlr3-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    monkeypatch.delenv(warm.DIR_ENV, raising=False)
    monkeypatch.setenv(warm.OWNER_ENV, warm.owner_here())
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_warm_folder_planted_in_a_shared_folder_is_not_used(runtime: Path, monkeypatch: pytest.MonkeyPatch,
                                                           other_user: tuple[str, int, int],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The round's attack: another user makes the victim's warm folder first in a shared, sticky folder (as /tmp
    is) and plants a `python` there. 88bb1f7 put it first on the run's PATH."""
    shared = runtime / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv(warm.DIR_ENV, str(shared))
    # 88bb1f7's layout: <dir>/mlrepro-warm-<uid>/<hash of owner, interpreter, PYTHONPATH>/python
    import hashlib

    owner = os.environ[warm.OWNER_ENV]
    key = f"{owner}\0{sys.executable}\0{os.environ.get('PYTHONPATH', '')}"
    for planted in (shared / f"mlrepro-warm-{os.getuid()}" / hashlib.sha256(key.encode()).hexdigest()[:12],
                    warm.parent_dir(owner)):
        planted.mkdir(parents=True, exist_ok=True)
        (planted / "python").write_text("#!/bin/sh\necho owned > /dev/null\n")
        for p in (planted / "python", planted, planted.parent):
            _give(p, other_user, 0o777 if p.is_dir() else 0o755)
    env = warm.shim_env("/usr/bin")
    assert env == {}  # the run starts cold: no folder of another user's on its PATH
    err = capsys.readouterr().err
    assert f"{shared}: owned by" in err and "mode 1777: open to other users" in err  # the folder and its owner


@pytest.mark.parametrize("plant", ["other_owner", "open_mode", "plain_file", "symlink"])
def test_warm_folder_not_private_is_refused_naming_it(runtime: Path, plant: str, other_user: tuple[str, int, int],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from mlrepro.core import private_dir

    folder = warm.parent_dir(os.environ[warm.OWNER_ENV])
    folder.parent.mkdir(parents=True, mode=0o700)
    if plant == "other_owner":
        folder.mkdir(mode=0o700)
        _give(folder, other_user)
    elif plant == "open_mode":
        folder.mkdir()
        folder.chmod(0o777)
    elif plant == "plain_file":
        folder.write_text("")
    else:
        elsewhere = runtime / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        folder.symlink_to(elsewhere)
    assert warm.shim_env("/usr/bin") == {}
    err = capsys.readouterr().err
    assert str(folder) in err and "owned by" in err  # the folder and its owner are named
    # the driver's other parents (hand_over) refuse it the same way: they go cold, never through it
    with pytest.raises(private_dir.PrivateDirError, match="owned by"):
        warm.private(folder)



def test_a_job_never_hands_over_to_a_listener_planted_in_its_warm_folder(runtime: Path,
                                                                        other_user: tuple[str, int, int]) -> None:
    """Another user makes the victim's warm folder first and listens on its parent.sock: a job handing over to its
    warm parent (warm._through_parent, hand_over's path) refuses the folder before it connects, and goes cold."""
    import socket
    import threading

    folder = warm.parent_dir(os.environ[warm.OWNER_ENV])
    folder.mkdir(parents=True, mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "parent.sock"))
    listener.listen(1)
    listener.settimeout(1)  # a connection comes while the job hands over, before the join
    connected = threading.Event()

    def serve() -> None:
        with contextlib.suppress(OSError):
            listener.accept()
            connected.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    for p in (folder / "parent.sock", folder, folder.parent):
        _give(p, other_user, 0o777 if p.is_dir() else None)
    try:
        said = warm._through_parent(folder, warm.MODULE, {"argv": ["--help"]}, dict(os.environ))
        thread.join()
    finally:
        listener.close()
    assert not connected.is_set(), "the job connected to the other user's listener"
    assert isinstance(said, str) and "owned by" in said, said

def test_runtime_base_writable_by_others_is_refused(runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlrepro.core import private_dir

    runtime.chmod(0o1777)
    with pytest.raises(private_dir.PrivateDirError, match=f"{runtime}: owned by .* mode 1777"):
        private_dir.base()
    runtime.chmod(0o700)
    made = private_dir.runtime_dir("x")
    assert made == runtime / "mlrepro" / "x" and (made.stat().st_mode & 0o777) == 0o700
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(runtime / "cache"))
    made = private_dir.base()  # no XDG_RUNTIME_DIR: a private folder in the user's own cache
    assert made == runtime / "cache" / "mlrepro" / "runtime" and (made.stat().st_mode & 0o777) == 0o700


def test_a_cache_folder_open_to_reading_keeps_the_runtime_folder_private(
        runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older mlrepro (its capture cache) or another program made ~/.cache/mlrepro with mode 755: the runtime
    folder below it is still made private and used; every run went cold, and GPU claims failed, while the
    runtime folder was ~/.cache/mlrepro itself. A cache folder others can write is refused."""
    from mlrepro.core import private_dir

    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(runtime / "cache"))
    (runtime / "cache" / "mlrepro").mkdir(parents=True, mode=0o755)
    (runtime / "cache" / "mlrepro").chmod(0o755)
    made = private_dir.runtime_dir("gpu-locks")
    assert made == runtime / "cache" / "mlrepro" / "runtime" / "gpu-locks"
    assert (made.parent.stat().st_mode & 0o777) == 0o700 and (made.stat().st_mode & 0o777) == 0o700
    (runtime / "cache" / "mlrepro").chmod(0o777)
    with pytest.raises(private_dir.PrivateDirError, match="mode 777"):
        private_dir.base()


# --- 2. no Python the project starts imports from its working folder -----------------------------------------

CANARY = "open({mark!r}, 'a').write(__name__ + '\\n')\n"


@pytest.fixture
def canaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A working folder holding mlrepro/, mlperf_logging/, pip/ and pynvml.py that record being imported."""
    work, mark = tmp_path / "work", tmp_path / "imported.txt"
    code = CANARY.format(mark=str(mark))
    for package in ("mlrepro", "mlperf_logging", "pip"):
        (work / package).mkdir(parents=True)
        (work / package / "__init__.py").write_text(code)
    (work / "pynvml.py").write_text(code)
    monkeypatch.chdir(work)
    return work, mark


def _imported(mark: Path) -> list[str]:
    return mark.read_text().split() if mark.exists() else []


def test_every_entry_point_ignores_modules_in_the_working_folder(canaries: tuple[Path, Path],
                                                                 tmp_path: Path) -> None:
    work, mark = canaries
    from mlrepro.audit.steps import Step, _compare
    from mlrepro.core import probe, versions
    from mlrepro.package import assemble
    from mlrepro.telemetry import start_sampler

    # the audit's isolated re-run (audit_logging=) and its compare re-run (audit_logging_compare=)
    (tmp_path / "logging").mkdir()
    versions.run_isolated(tmp_path / "logging", ["-m", "mlrepro.audit", "--help"])
    (tmp_path / "round").mkdir()
    with contextlib.suppress(FileNotFoundError):  # no first audit to compare with: only its re-runs matter here
        _compare(Step("summarize", tmp_path / "round", tmp_path / "out", "1.1.0", max_file_mb=1.0,
                      compare_logging="installed"))
    # the package checker, pip freeze
    assemble.check(tmp_path / "round", "training", "1.1.0")
    probe.pip_freeze()
    # a rule's job, as Snakemake runs it in this working folder (rules/dispatch.py), with the working folder on the
    # path as Snakemake puts it there when it was started here as `python -m snakemake`
    result = write_mllog(tmp_path / "run" / "result.txt", "resnet", 1_700_000_000_000, 2.0)
    job = make_job("compliance", input={"result": result}, output={"verdict": tmp_path / "verdict.json"},
                   params={"usage": "training", "ruleset": "2.0.0", "release": None}, log=tmp_path / "c.log")
    proc = dispatch(work, job, extra_path=[str(work)])
    assert proc.returncode == 0 and (tmp_path / "verdict.json").is_file(), proc.stderr
    # a reproduction's native data job: the interpreter it starts runs the staged copy's generator (first on its
    # path), not the one of the working folder's mlrepro/ (nor the installed one)
    staged = tmp_path / "staged"
    (staged / "mlrepro" / "datasets").mkdir(parents=True)
    (staged / "mlrepro" / "__init__.py").write_text("")
    (staged / "mlrepro" / "datasets" / "__init__.py").write_text("")
    (staged / "mlrepro" / "datasets" / "generated.py").write_text(
        "import sys\nfrom pathlib import Path\n"
        "Path(sys.argv[sys.argv.index('--out') + 1]).mkdir(parents=True)\n"
        "(Path(sys.argv[sys.argv.index('--out') + 1]) / 'staged.txt').write_text(' '.join(sys.argv[1:]))\n")
    job = make_job("reproduce_data", input={"stage": staged, "image": []},
                   output={"manifest": tmp_path / "data" / "resnet" / "MANIFEST.sha256"},
                   params={"folder": tmp_path / "data" / "resnet", "data": {"data": {"n": 1}}, "seed": 7},
                   wildcards={"benchmark": "resnet"}, log=tmp_path / "d.log")
    proc = dispatch(work, job, extra_path=[str(work)])
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "data" / "resnet" / "staged.txt").read_text() == (
        f'--benchmark resnet --out {tmp_path / "data" / "resnet"} --params {{"data": {{"n": 1}}}} --seed 7')
    # the telemetry sampler (NVML: it imports pynvml)
    handle = start_sampler(tmp_path / "telemetry", hz=10, backend="nvml", ready_timeout_s=60)
    handle.stop()
    assert _imported(mark) == []


# What makes a rule a job besides script: (Snakemake's directives): none may run a command or Python of its own.
_JOB_DIRECTIVES = re.compile(r"^\s+(shell|run|script|wrapper|notebook|cwl|template_engine):", re.MULTILINE)


def test_every_rules_job_is_the_dispatcher_and_run_scripts_start_python_isolated() -> None:
    """No rule starts an interpreter of its own (a shell command's `python -m`, which would put the working folder
    first on the path without -P, or a run: block): each job is rules/dispatch.py, which takes the working folder
    off its path (mlrepro/jobs.py: _isolate_path; above: the compliance job in a working folder of canaries); the
    rules without one are targets (all, audit_all, ...)."""
    targets = set()
    for rules in [REPO / "Snakefile", *(REPO / "rules").glob("*.smk")]:
        text = rules.read_text()
        for block in re.split(r"\n(?=\s*rule\b)", text):
            if not (name := re.match(r"\s*rule\s*(\w*):", block)):
                continue  # what comes before the first rule
            directives = _JOB_DIRECTIVES.findall(block)
            if not directives:
                targets.add(name.group(1))
            else:
                assert directives == ["script"] and re.search(r'script:\s*\n\s*"dispatch.py"', block), (
                    rules.name, block[:300])
        assert not re.search(r"^\s+python=", text, re.MULTILINE), rules
        assert " python -m" not in text and '"python -m' not in text, rules
    assert targets == {"all", "audit", "audit_all", "datasets", "inference_audit_all", "reproduce", "reproduce_all"}
    for script in (REPO / "minis").glob("*/run_and_time.sh"):
        assert "exec python -P -m mlrepro.train " in script.read_text(), script


def test_warm_child_has_no_working_folder_on_its_path(runtime: Path, canaries: tuple[Path, Path]) -> None:
    work, _ = canaries
    owner = os.environ[warm.OWNER_ENV]
    folder = warm.parent_dir(owner)
    for d in (folder.parent, folder):
        d.mkdir(mode=0o700, exist_ok=True)
    shim = folder / "python"
    shim.write_text(f"#!{sys.executable} -I\nimport sys\nsys.path.insert(0, {str(REPO)!r})\n"
                    "from mlrepro.runs.warm import shim_main\n"
                    f"shim_main({sys.executable!r}, module='tests.warm_counter')\n")
    shim.chmod(0o700)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        out = subprocess.run([str(shim), "-P", "-m", "tests.warm_counter", "1"], env=env, cwd=work,
                             capture_output=True, text=True, check=True, timeout=120).stdout
        run = json.loads(out)
        assert run["ppid"] == int((folder / "parent.pid").read_text())  # served warm
        assert run["cwd"] == str(work) and run["cwd_on_path"] is False
    finally:
        pid = folder / "parent.pid"
        if pid.exists():
            os.kill(int(pid.read_text()), signal.SIGTERM)


# --- 3. .ci/podman.sh as root ----------------------------------------------------------------------------------


def _podman_sh(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / ".ci" / "podman.sh"), *args], capture_output=True, text=True,
                          env={**os.environ, "MLREPRO_PODMAN_STATE": str(state)}, timeout=60, check=False)


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this user's that a planted pid file names."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_podman_stop_kills_only_the_service_it_started(tmp_path: Path, bystander: subprocess.Popen[bytes],
                                                       other_user: tuple[str, int, int]) -> None:
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "service.pid").write_text(f"{bystander.pid}\n")
    _give(planted / "service.pid", other_user)
    _give(planted, other_user, 0o777)
    proc = _podman_sh(planted, "stop")
    assert proc.returncode != 0 and str(planted) in proc.stderr and other_user[0] in proc.stderr
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    start = Path(f"/proc/{bystander.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    (own / "service.pid").write_text(f"{bystander.pid} {start}\n")  # a pid that is not the podman service
    proc = _podman_sh(own, "stop")
    assert "not stopping pid" in proc.stderr
    time.sleep(0.2)
    assert bystander.poll() is None  # alive: neither pid file made podman.sh kill it


def test_podman_start_refuses_a_state_folder_it_cannot_trust(tmp_path: Path,
                                                             other_user: tuple[str, int, int]) -> None:
    victim = tmp_path / "victim.conf"
    victim.write_text("root's file\n")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "containers.conf").symlink_to(victim)
    _give(planted, other_user, 0o777)
    proc = _podman_sh(planted, "start")
    assert proc.returncode != 0 and "refusing" in proc.stderr and other_user[0] in proc.stderr
    assert victim.read_text() == "root's file\n"
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    proc = _podman_sh(link, "start")
    assert proc.returncode != 0 and "symlink" in proc.stderr


# --- 4. a shared data_root -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    from tests import dataset_sources as src

    with src.serving() as s:
        yield s


def _prepared(server, tmp: Path):  # type: ignore[no-untyped-def]
    from mlrepro.datasets import recipe, steps
    from tests import dataset_sources as src

    files = src.minigo()
    r = recipe.load("minigo", src.recipe_for("minigo", server, tmp, files, src.EXTRA["minigo"]))
    root = tmp / "data_root" / "minigo"
    steps.download(r, root, tmp / "download.json", progressbar=False)
    steps.verify(r, root, tmp / "verify.json")
    steps.extract(r, root, tmp / "extract.json")
    steps.prepare_step(r, root, tmp / "prepare.json")
    return r, root


def test_poisoned_prepared_folder_is_rebuilt_not_used(server, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    from mlrepro.datasets import stamps, steps

    r, root = _prepared(server, tmp_path)
    prepared = root / "prepared"
    victim = next(p for p in sorted(prepared.rglob("*")) if p.is_file() and not p.name.startswith(".")
                  and p.name != "MANIFEST.sha256")
    (prepared / "POISON.JPEG").write_bytes(b"planted")  # a file beyond the manifest
    steps.prepare_step(r, root, tmp_path / "prepare2.json")
    assert not (prepared / "POISON.JPEG").exists()
    aside = list(root.glob("prepared.rejected-*"))
    assert len(aside) == 1 and (aside[0] / "POISON.JPEG").exists()  # kept, for inspection
    assert "POISON.JPEG: not in" in capfd.readouterr().err
    # a listed file changed: its hash no longer matches
    victim.write_bytes(b"changed")
    steps.prepare_step(r, root, tmp_path / "prepare3.json")
    assert stamps.verify_folders([prepared], progress=False)[0] == []


def test_prepared_folder_of_another_user_is_rebuilt(server, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                    other_user: tuple[str, int, int]) -> None:
    from mlrepro.datasets import steps
    from mlrepro.datasets.manifest import MANIFEST

    r, root = _prepared(server, tmp_path)
    prepared = root / "prepared"
    _give(prepared / MANIFEST, other_user)  # its manifest could be rewritten to match anything they planted
    assert steps.reuse_problems(prepared, None) and "owned by" in steps.reuse_problems(prepared, None)[0]
    assert steps.reuse_problems(prepared, other_user[2]) == []  # unless the config names their group
    steps.prepare_step(r, root, tmp_path / "prepare2.json")
    assert (prepared / MANIFEST).stat().st_uid == os.geteuid()
    assert len(list(root.glob("prepared.rejected-*"))) == 1


# --- 5. the inference audit ------------------------------------------------------------------------------------

SUMMARY = """================================================
MLPerf Results Summary
================================================
SUT name : X
Scenario : Offline
Mode     : PerformanceOnly
Samples per second: {value}
Result is : VALID
  Min duration satisfied : Yes
  Min queries satisfied : Yes

No errors encountered during test.
"""


def _strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_inference_audit_judges_every_hostile_entry_and_ranks_no_non_finite_number(tmp_path: Path) -> None:
    root = tmp_path / "round"
    org = root / "closed" / "Org"
    (org / "systems").mkdir(parents=True)
    systems = {"good": '{"accelerators_per_node": 2}', "inf": '{"accelerators_per_node": Infinity}',
               "big": '{"accelerators_per_node": "1e400"}', "nan": '{"accelerators_per_node": NaN}',
               "neg": '{"accelerators_per_node": -3}',
               "deep": '{"accelerators_per_node": 1, "x": ' + "[" * 200_000 + "]" * 200_000 + "}"}
    for name, text in systems.items():
        (org / "systems" / f"{name}.json").write_text(text)
    values = {"resnet50": "1000", "bert-99": "inf", "dlrm-99": "nan", "ssd-resnet34": "1e308", "rnnt": "-5"}
    for bench, value in values.items():
        d = org / "results" / "good" / bench / "Offline" / "performance" / "run_1"
        d.mkdir(parents=True)
        (d / "mlperf_log_summary.txt").write_text(SUMMARY.format(value=value))
    for name in systems:  # every system has one good summary: only its JSON can fail it
        d = org / "results" / name / "resnet50" / "Offline" / "performance" / "run_1"
        d.mkdir(parents=True, exist_ok=True)
        (d / "mlperf_log_summary.txt").write_text(SUMMARY.format(value="1000"))
    outside = tmp_path / "outside" / "Evil"
    (outside / "results" / "good" / "resnet50" / "Offline" / "performance" / "run_1").mkdir(parents=True)
    (outside / "results" / "good" / "resnet50" / "Offline" / "performance" / "run_1" /
     "mlperf_log_summary.txt").write_text(SUMMARY.format(value="9e9"))
    (root / "open").symlink_to(tmp_path / "outside")  # a division folder that is a symlink

    report = iaudit.audit(root)
    by_system = {s["system"]: s for s in report["systems"]}
    assert by_system["good"]["accelerators"] == 2 and by_system["good"]["status"] == "ok"
    for name, shown in (("inf", "inf"), ("big", "1e400"), ("nan", "nan"), ("neg", "-3"), ("deep", "deep")):
        entry = by_system[name]
        assert entry["status"] == "error" and entry["accelerators"] is None, entry
        assert shown in entry["message"].lower(), entry
    by_bench = {r["benchmark"]: r for r in report["results"] if r["system"] == "good"}
    assert by_bench["resnet50"]["per_accelerator"] == 500.0
    for bench in ("bert-99", "dlrm-99", "ssd-resnet34", "rnnt"):
        entry = by_bench[bench]
        assert entry["status"] == "error" and entry["verdict"] is None and entry["metric"] is None, entry
        assert "not a measurement" in entry["message"] and values[bench] in entry["message"], entry
    assert {r["org"] for r in report["results"]} == {"Org"}  # nothing through the symlinked division
    out = tmp_path / "out"
    iaudit.write(report, out)
    _strict((out / "inference_results.json").read_text())  # strict JSON: no NaN, no Infinity
    _, seed_rows = iaudit.seed_by_accelerator(report)
    ranked = [c["per_accelerator"] for r in seed_rows for c in r["cells"].values()]
    assert ranked == [500.0]


def test_one_entry_that_fails_unforeseen_does_not_stop_the_round(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "round"
    org = root / "closed" / "Org"
    (org / "systems").mkdir(parents=True)
    (org / "systems" / "s.json").write_text('{"accelerators_per_node": 1}')
    for bench in ("a", "b"):
        d = org / "results" / "s" / bench / "Offline" / "performance" / "run_1"
        d.mkdir(parents=True)
        (d / "mlperf_log_summary.txt").write_text(SUMMARY.format(value="10"))
    real = iaudit.summary.read

    def read(path: Path):  # type: ignore[no-untyped-def]
        if "/a/" in str(path):
            raise OverflowError("cannot convert float infinity to integer")
        return real(path)

    monkeypatch.setattr(iaudit.summary, "read", read)
    report = iaudit.audit(root)
    by_bench = {r["benchmark"]: r for r in report["results"]}
    assert by_bench["b"]["status"] == "ok"
    assert by_bench["a"]["status"] == "error" and "OverflowError" in by_bench["a"]["message"]
    assert "closed/Org/results/s/a/Offline" in by_bench["a"]["message"]


# --- 6. config and environment -----------------------------------------------------------------------------------


def _default() -> dict[str, object]:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def test_a_template_config_is_refused_unless_allowed(tmp_path: Path) -> None:
    template = tmp_path / "cfg.yaml"
    template.write_text("__use_yte__: true\norg: ?'x' + 'y'\n")
    with pytest.raises(mlconfig.ConfigError, match="allow_templates=true"):
        mlconfig.refuse_templates([template], allowed=False)
    mlconfig.refuse_templates([template], allowed=True)
    plain = tmp_path / "plain.yaml"
    plain.write_text("org: xy\n")
    mlconfig.refuse_templates([plain], allowed=False)
    with pytest.raises(mlconfig.ConfigError, match="template"):
        mlconfig.check_file(template)


@pytest.mark.parametrize(("change", "expected"), [
    ({"org": "abc\n"}, "org: 'abc\\n' does not match"),
    ({"system": "box\n"}, "system: 'box\\n' does not match"),
    ({"seed": 2**64}, "seed: 18446744073709551616 is greater than the maximum"),
    ({"data_seed": 2**64}, "data_seed: 18446744073709551616 is greater than the maximum"),
    ({"threads_per_run": 10**20}, "threads_per_run: 100000000000000000000 is greater than the maximum"),
    ({"telemetry": {"hz": 1e-300}}, "telemetry.hz: 1e-300 is less than the minimum of 0.1"),
])
def test_numbers_and_names_out_of_bounds_are_refused(change: dict[str, object], expected: str) -> None:
    raw = {**_default(), **change}
    with pytest.raises(mlconfig.ConfigError) as err:
        mlconfig.load(raw, "config.yaml")
    assert expected in str(err.value)


def test_environment_variables_are_held_to_their_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlrepro.slurm.resources import ShapeError, shape_from_config_sh

    monkeypatch.setenv(mlconfig.SYSTEM_ENV, "../../../x")
    with pytest.raises(mlconfig.ConfigError, match=f"{mlconfig.SYSTEM_ENV}=.*not a system name"):
        mlconfig.system_name("auto")
    monkeypatch.setenv(mlconfig.SYSTEM_ENV, "node-1.a")
    assert mlconfig.system_name("auto") == "node-1.a"
    with pytest.raises(ShapeError, match="DGXNNODES >= 1"):
        shape_from_config_sh({"DGXNNODES": "0", "DGXNGPU": "8"})


def test_yaml_anchors_do_not_blow_up_the_error_message() -> None:
    levels = ['a0: &a0 ["xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    doc = yaml.safe_load("anchors:\n" + "\n".join(f"  {line}" for line in levels) + "\norg: *a7\n")
    raw = {**_default(), "org": doc["org"]}
    started = time.monotonic()
    with pytest.raises(mlconfig.ConfigError) as err:
        mlconfig.load(raw, "config.yaml")
    assert len(str(err.value)) < 2000 and "more than" in str(err.value)
    assert time.monotonic() - started < 10


# --- 7. faults: the ledger and a failed step's log ------------------------------------------------------------------


def test_ledger_short_write_fails_loudly_and_leaves_whole_lines(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / ledger.LEDGER
    ledger.append(path, {"event": "launch", "launch": "a"})
    before = path.read_bytes()
    real = os.write

    def full_disk(fd: int, data: bytes) -> int:  # what a nearly full disk does: part of the line, then ENOSPC
        if len(data) > 8:
            return real(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ledger.os, "write", full_disk)
    with pytest.raises(ledger.LedgerError, match="could not be written whole"):
        ledger.append(path, {"event": "end", "launch": "a", "status": "success"})
    monkeypatch.undo()
    assert path.read_bytes() == before


def test_ledger_torn_last_line_is_repaired_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / ledger.LEDGER
    path.write_text(json.dumps({"event": "launch", "launch": "a", "run": "r"}) + '\n{"event": "end", "lau')
    assert [r["status"] for r in ledger.read(path)] == ["no end record"]
    ledger.append(path, {"event": "launch", "launch": "b", "run": "r"})
    assert [json.loads(line)["launch"] for line in path.read_text().splitlines()] == ["a", "b"]


def test_failed_step_with_an_empty_log_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlrepro.core import joblog

    log = tmp_path / "compliance.log"
    log.write_text("")

    class Full:
        f_bavail, f_frsize, f_favail = 0, 4096, 100

    monkeypatch.setattr(joblog.os, "statvfs", lambda _p: Full())
    text = joblog.explain(log, 1)
    assert str(log) in text and "is empty" in text and "ENOSPC" in text
    log.write_text("error: the checker says no\n")
    assert joblog.explain(log, 1) == "error: the checker says no\n"
    # every rule's failed job puts this on the terminal (mlrepro/jobs.py)
    from mlrepro import jobs

    assert "explain(" in inspect.getsource(jobs.run)
    assert "dispatch.py" in (REPO / "rules" / "compliance.smk").read_text()
