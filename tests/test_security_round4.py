"""Security round 4 (issue 43): a package's code writes nothing of the auditor's, reproduced times come from our clock,
a config is data. Each hostile folder or file is built here; each test shows the attack failing."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlrepro import config
from mlrepro.core import untrusted_dir
from mlrepro.core.untrusted_dir import PlantedLink
from mlrepro.runs import driver, ledger
from mlrepro.runs.launch_spec import LaunchSpec
from tests.conftest import REPO, write_mllog

# --- High 1 and 6: a run folder is hostile; the pipeline follows no link there


def _victims(tmp_path: Path) -> dict[str, Path]:
    """Files of the auditor that a planted link points at: a shell start-up file and keys, each one unterminated line
    (the torn-tail repair of the ledger would have cut it to 0 bytes)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    victims = {"bashrc": home / ".bashrc", "keys": home / ".ssh" / "authorized_keys"}
    victims["bashrc"].write_text("export PS1=victim")
    victims["keys"].write_text("ssh-ed25519 AAAA victim@host")
    return victims


def _snapshot(files: dict[str, Path]) -> dict[str, tuple[bytes, int]]:
    return {k: (p.read_bytes(), p.stat().st_mtime_ns) for k, p in files.items()}


def _hostile_launch(tmp_path: Path, plant: str) -> LaunchSpec:
    """A package's implementation folder whose run_and_time.sh logs a valid run and runs ``plant`` in its run folder
    ($LOGDIR) first, as a package's code can (in a container, the run folder is mounted read-write at /results)."""
    folder = tmp_path / "impl"
    folder.mkdir()
    write_mllog(folder / "log.txt", "resnet", int(time.time() * 1000), 0.01)
    (folder / "run_and_time.sh").write_text(f'cd "$LOGDIR"\n{plant}\ncat "{folder}/log.txt"\n')
    (tmp_path / "data").mkdir()
    return LaunchSpec(benchmark="resnet", kind="vendor", name="hostile", folder=str(folder), config_file="config.sh",
                      env={}, params={}, data_dir=str(tmp_path / "data"),
                      submission={"org": "t", "platform": "p", "division": "open", "status": "research"})


HOME = "$VICTIM_HOME"
PLANTS = {
    "ledger symlink": f"ln -sf {HOME}/.bashrc ledger.jsonl",
    "ledger hard link": f"rm -f ledger.jsonl; ln {HOME}/.ssh/authorized_keys ledger.jsonl",
    "result symlink": f"ln -s {HOME}/.bashrc result.txt",
    "run.json symlink": f"ln -s {HOME}/.ssh/authorized_keys run.json",
    "telemetry folder symlink": f"rm -rf telemetry; ln -s {HOME}/.ssh telemetry",
    "log replaced by a symlink": f"rm -f train.log; ln -s {HOME}/.bashrc train.log",
    "hard link to a victim elsewhere": f"ln {HOME}/.bashrc notes.txt",
    "fifo": "mkfifo run.json.fifo",
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_links_planted_by_a_run_stop_it_and_change_no_target(tmp_path: Path, plant: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    victims = _victims(tmp_path)
    before = _snapshot(victims)
    monkeypatch.setenv("VICTIM_HOME", str(tmp_path / "home"))
    launch = _hostile_launch(tmp_path, PLANTS[plant])
    run_dir = tmp_path / "runs" / "0"
    with pytest.raises((driver.RunFailed, PlantedLink)) as failed:
        driver.drive(launch, 1, run_dir, driver.Options(gpus="0", gpu_locks=str(tmp_path / "locks")))
    message = str(failed.value)
    assert str(run_dir) in message and ("symlink" in message or "hard link" in message or "special" in message)
    assert _snapshot(victims) == before
    assert not (run_dir / "run.json").is_file() or (run_dir / "run.json").is_symlink()


def test_a_ledger_left_as_a_link_is_refused_before_anything_is_cut_or_written(tmp_path: Path) -> None:
    victims = _victims(tmp_path)
    before = _snapshot(victims)
    for i, victim in enumerate(victims.values()):
        run_dir = tmp_path / f"run{i}"
        run_dir.mkdir()
        link = run_dir / ledger.LEDGER
        if i:
            os.link(victim, link)
        else:
            link.symlink_to(victim)
        with pytest.raises(PlantedLink, match=r"ledger\.jsonl: .*(symlink|2 hard links)"), \
                ledger.recorded(run_dir, benchmark="resnet", seed=1):
            pytest.fail("the run must not start")
    assert _snapshot(victims) == before


def test_every_writer_of_a_run_folder_follows_no_link(tmp_path: Path) -> None:
    """The helper's writers, one by one, against a link at the name and a linked folder on the way."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "a").symlink_to(victim)
    with pytest.raises(PlantedLink, match="symlink"):
        untrusted_dir.open_append(run, "a")
    with pytest.raises(PlantedLink, match="symlink"):
        untrusted_dir.read_bytes(run, "a", 100)
    untrusted_dir.write_text(run, "a", "new")  # renamed over the link: the link goes, its target stays
    assert not (run / "a").is_symlink() and (run / "a").read_text() == "new" and victim.read_text() == "keep"
    (run / "b").symlink_to(victim)
    os.close(untrusted_dir.create(run, "b"))
    assert not (run / "b").is_symlink() and victim.read_text() == "keep"
    (run / "telemetry").symlink_to(outside, target_is_directory=True)
    for write in (lambda: untrusted_dir.write_text(run, "telemetry/x", "y"),
                  lambda: untrusted_dir.open_append(run, "telemetry/x")):
        with pytest.raises(PlantedLink, match=r"telemetry: expected a folder, found a symlink"):
            write()
    assert list(outside.iterdir()) == []
    os.mkfifo(run / "fifo")
    with pytest.raises(PlantedLink, match="special file"):  # no hang
        untrusted_dir.read_bytes(run, "fifo", 100)
    (run / "other").write_text("x")
    os.chown(run / "other", 12345, 12345)
    with pytest.raises(PlantedLink, match="another user"):
        untrusted_dir.open_append(run, "other")
    (run / "tool").write_text("")
    (run / "tool").chmod(0o4755)
    assert sorted(Path(p.split(":")[0]).name for p in untrusted_dir.planted(run)) == ["fifo", "telemetry", "tool"]
    assert (run / "tool").stat().st_mode & 0o7777 == 0o755


def test_an_engine_appends_to_no_linked_log(tmp_path: Path) -> None:
    from mlrepro.engines import get_engine

    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "train.log").symlink_to(victim)
    with pytest.raises(PlantedLink):
        get_engine("native").run(["true"], image=None, mounts=[], gpus=[], env={}, log=tmp_path / "train.log")
    assert victim.read_text() == "keep"


def test_a_clean_run_still_records_its_result(tmp_path: Path) -> None:
    launch = _hostile_launch(tmp_path, "mkdir -p own && echo fine > own/notes.txt")
    run_dir = tmp_path / "runs" / "0"
    driver.drive(launch, 1, run_dir, driver.Options(gpus="0", gpu_locks=str(tmp_path / "locks")))
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "success" and (run_dir / "result.txt").read_text().count(":::MLLOG") == 18
    assert [r["status"] for r in ledger.read(run_dir / ledger.LEDGER)] == ["success"]
    assert oct((run_dir / "run.json").stat().st_mode & 0o777) == oct(0o644)


# --- High 4 and the lows on config values: a config is data


def _config_with(change: dict[str, Any]) -> dict[str, Any]:
    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    return config.deep_merge(raw, change)


HOSTILE_ENV = {
    "BASH_ENV": "/home/someone_else/payload.sh", "ENV": "/tmp/x.sh", "LD_PRELOAD": "/tmp/x.so", "PATH": "/tmp/bin",
    "PYTHONSTARTUP": "/tmp/x.py", "PS4": "$(id)", "SHELLOPTS": "xtrace", "BASHOPTS": "extdebug", "IFS": "/",
    "CDPATH": "/tmp", "BASH_FUNC_srun%%": "() { id; }", "PERL5OPT": "-Mx", "NODE_OPTIONS": "--require=/tmp/x.js",
    "RUBYOPT": "-r/tmp/x", "JAVA_TOOL_OPTIONS": "-javaagent:/tmp/x.jar", "GCONV_PATH": "/tmp", "HOME": "/tmp/h",
    "SLURM_TASK_PROLOG": "/tmp/x.sh", "APPTAINER_BIND": "/:/host", "ENROOT_MOUNT_HOME": "y", "bash_env": "/x.sh",
    "A=B": "c", "": "x", "1X": "y",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_ENV))
@pytest.mark.parametrize("where", ["systems", "benchmarks"])
def test_an_env_name_that_runs_code_is_refused_by_check_and_planning(tmp_path: Path, name: str, where: str) -> None:
    block = {"env": {name: HOSTILE_ENV[name]}}
    change = {"systems": {"dgx": block}} if where == "systems" else {"benchmarks": {"resnet": block}}
    path = tmp_path / "their.yaml"
    path.write_text(yaml.safe_dump(_config_with(change)))
    key = f"{where}.{'dgx' if where == 'systems' else 'resnet'}.env.{name}"
    with pytest.raises(config.ConfigError, match=re.escape(key) + ": (not a variable name|a variable that makes)"):
        config.check_file(path)
    with pytest.raises(config.ConfigError, match=re.escape(key)):
        config.load(_config_with(change), "their.yaml")


@pytest.mark.parametrize(("value", "why"), [("a\nb", "line break"), ("a\0b", "NUL"), ("x" * 5000, "5000 characters")])
def test_an_env_value_must_be_one_bounded_line(tmp_path: Path, value: str, why: str) -> None:
    with pytest.raises(config.ConfigError, match=rf"benchmarks\.resnet\.env\.EVALDIR: .*{why}"):
        config.load(_config_with({"benchmarks": {"resnet": {"env": {"EVALDIR": value}}}}), "c.yaml")


def test_ordinary_env_names_pass_and_check_prints_no_traceback(tmp_path: Path) -> None:
    ok = {"EVALDIR": "/data/eval", "NCCL_SOCKET_IFNAME": "ib0", "OMPI_MCA_btl": "^openib", "MLPERF_CLUSTER_NAME": "c",
          "CHECKPOINTDIR": "/ckpt", "UCX_TLS": "rc", "NUM_WORKERS": 4}
    config.load(_config_with({"benchmarks": {"resnet": {"env": ok}}}), "c.yaml")
    path = tmp_path / "their.yaml"
    path.write_text(yaml.safe_dump({"systems": {"dgx": {"env": {"BASH_ENV": "/x.sh"}}}}))
    proc = subprocess.run([sys.executable, "-P", "-m", "mlrepro.config", "check", str(path)], capture_output=True,
                          text=True, cwd=REPO, check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: invalid configuration")
    assert "systems.dgx.env.BASH_ENV" in proc.stderr and "Traceback" not in proc.stderr


def test_slurm_extra_is_anchored_at_the_very_end() -> None:
    bad = {"slurm": {"data_steps": {"generate": {"slurm_extra": "--tmp=500G\n"}}}}
    with pytest.raises(config.ConfigError, match=r"slurm\.data_steps\.generate\.slurm_extra"):
        config.load(_config_with(bad), "c.yaml")
    config.load(_config_with({"slurm": {"data_steps": {"generate": {"slurm_extra": "--tmp=500G"}}}}), "c.yaml")


# --- High 2 and 3: reproduced times by our clock, on the accelerators the run really used

GEN = """import json, sys, time
template, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
lines = [json.loads(line.split(" ", 1)[1]) for line in open(template)]
base = next(e["time_ms"] for e in lines if e["key"] == "run_start")
now = int(time.time() * 1000)
if mode == "train":  # a real run: it trains for the seconds it logs
    time.sleep(seconds)
shift = {"copy": 0, "train": now - base, "forward": now - base, "backdate": now - base - int(seconds * 1000)}[mode]
for e in lines:
    e["time_ms"] += shift
    print(":::MLLOG " + json.dumps(e))
"""


def _package_run(tmp_path: Path, mode: str, seconds: float, seed: int) -> LaunchSpec:
    """An implementation whose run_and_time.sh logs a run of ``seconds`` as ``mode`` says: trains them (train), or
    prints the submission's log (copy), or claims them at once with now as run_start (forward) or run_stop
    (backdate)."""
    folder = tmp_path / "impl"
    folder.mkdir(exist_ok=True)
    (folder / "gen.py").write_text(GEN)
    write_mllog(folder / f"template{seed}.txt", "resnet", 1_700_000_000_000 + seed, seconds / 60, seed=seed)
    (folder / "run_and_time.sh").write_text(f'exec python3 "{folder}/gen.py" "{folder}/template$SEED.txt" '
                                            f'{mode} {seconds}\n')
    (tmp_path / "data").mkdir(exist_ok=True)
    return LaunchSpec(benchmark="resnet", kind="vendor", name="pkg", folder=str(folder), config_file="config.sh",
                      env={}, params={}, data_dir=str(tmp_path / "data"), gpus=1,
                      submission={"org": "t", "platform": "p", "division": "open", "status": "research"})


def _trace(tmp_path: Path, name: str, memory: int) -> str:
    trace = {"system": {"driver_version": "550"}, "devices": [
        {"index": i, "uuid": f"GPU-{i}", "name": name, "samples": [{"t_ms": 0, "mem_total_bytes": memory}]}
        for i in range(2)]}
    path = tmp_path / f"trace-{name.replace(' ', '_')}.json"
    path.write_text(json.dumps(trace))
    return f"replay:{path}"


def _reproduction(tmp_path: Path, mode: str, submitted_s: float, reproduced_s: float, gpu: str,
                  runs: int = 3) -> dict[str, Any]:
    """A package of ``runs`` submitted results on one H100 80GB per node, reproduced through the run driver (its
    run.json as the reproduction writes it, with the replayed NVML of ``gpu``), then compared."""
    from mlrepro.core.outputs import Outputs
    from mlrepro.reproduce import compare
    from mlrepro.reproduce.plan import BenchmarkPlan

    org, rep = tmp_path / "org", Outputs(tmp_path / "reproduction")  # the run stage's layout
    (org / "systems").mkdir(parents=True)
    desc = {"division": "open", "accelerators_per_node": "1", "accelerator_model_name": "NVIDIA H100-SXM5-80GB",
            "accelerator_memory_capacity": "80 GB"}
    (org / "systems" / "sys.json").write_text(json.dumps(desc))
    memory = (80 if "80GB" in gpu else 40) << 30
    backend = _trace(tmp_path, gpu, memory)
    files = []
    for seed in range(runs):
        files.append(str(write_mllog(org / "results" / "sys" / "resnet" / f"result_{seed}.txt", "resnet",
                                     1_700_000_000_000 + seed, submitted_s / 60, seed=seed)))
        launch = _package_run(tmp_path, mode, reproduced_s, seed)
        driver.drive(launch, seed, rep.run_dir("sys", "resnet", seed),
                     driver.Options(gpus="2", gpu_locks=str(tmp_path / "locks"), telemetry_backend=backend))
        rep.verdict("sys", "resnet", seed).parent.mkdir(parents=True, exist_ok=True)
        rep.verdict("sys", "resnet", seed).write_text(json.dumps({"valid": True}))
    plan = BenchmarkPlan(name="resnet", implementation="", result_files=files, seeds=list(range(runs)), params={},
                         data_seed=0, submission={}, dataset_sha256=None)
    return compare.compare_benchmark(plan, org, rep, "sys", desc, "4.1.0")


@pytest.mark.parametrize("mode", ["copy", "forward", "backdate"])
def test_times_a_package_logs_but_did_not_take_are_not_reproduced(tmp_path: Path, mode: str) -> None:
    """A run of a fraction of a second that logs nine minutes (the submission's own log, or timed from now either
    way): the log's window is not the launch's, so the package's log cannot be trusted."""
    b = _reproduction(tmp_path, mode, 540.0, 540.0, "NVIDIA H100 80GB HBM3", runs=1)
    assert b["verdict"] == "not reproduced", b
    assert "the package's log cannot be trusted" in b["reasons"][0]
    clock = b["runs"][0]["our_clock"]
    assert clock["logged_seconds"] == pytest.approx(540) and clock["wall_seconds"] < 60
    assert any("outside the launch" in p for p in clock["problems"])


def test_the_time_decides_on_the_accelerators_the_run_recorded(tmp_path: Path) -> None:
    """Reproduced runs 30% slower (and more) on the submission's class of GPU, as the run recorded it from (replayed)
    NVML: the time decides and the result is not reproduced. On another class, the times are not comparable."""
    b = _reproduction(tmp_path / "h100", "train", 0.4, 0.6, "NVIDIA H100 80GB HBM3")
    run_dir = tmp_path / "h100" / "reproduction" / "runs" / "sys" / "resnet" / "0"
    recorded = json.loads((run_dir / "run.json").read_text())
    assert recorded["accelerators"]["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert recorded["accelerators"]["count"] == 1 and recorded["wall"]["seconds"] >= 0.6
    assert b["times"]["hardware_comparable"] and b["numeric"]["time_decides"]
    assert b["verdict"] == "not reproduced" and any("longer than the submitted" in r for r in b["reasons"]), b
    assert all(not r["our_clock"]["problems"] for r in b["runs"])
    other = _reproduction(tmp_path / "a100", "train", 0.4, 0.6, "NVIDIA A100-SXM4-40GB")
    assert not other["times"]["hardware_comparable"] and "a reproduced run on NVIDIA A100" in other["times"]["note"]


def test_the_report_shows_our_clock_beside_the_logged_times(tmp_path: Path) -> None:
    from mlrepro.reproduce import compare
    from mlrepro.reproduce.report import write_report

    b = _reproduction(tmp_path, "copy", 540.0, 540.0, "NVIDIA H100 80GB HBM3", runs=1)
    doc = {"package": str(tmp_path / "org"), "system": "sys", "runs": 1, "notes": [], "verdict": b["verdict"],
           "package_changes": [], "manifest_sha256": None, "method": compare.METHOD, "benchmarks": [b]}
    write_report(doc, tmp_path / "r.json", tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert "Its code ran (s, our clock)" in html and "lie outside the launch" in html and "self-reported" in html


# --- High 5: records that later steps trust are this user's alone


def _tampered(path: Path, how: str, text: str) -> None:
    """A group member's (or the run's code's) change of a record in a group-writable output folder."""
    if how == "replaced by another user":  # the folder is group-writable: remove and write anew, as uid 12345
        path.unlink()
        path.write_text(text)
        os.chown(path, 12345, 12345)
    elif how == "rewritten in place, group-writable":  # left 664 by an older writer under umask 002
        path.chmod(0o664)
        path.write_text(text)
    elif how == "a symlink":
        other = path.with_name("elsewhere.json")
        other.write_text(text)
        path.unlink()
        path.symlink_to(other)
    elif how == "a hard link":
        other = path.with_name("elsewhere.json")
        other.write_text(text)
        other.chmod(0o644)
        path.unlink()
        os.link(other, path)


TAMPERING = ["replaced by another user", "rewritten in place, group-writable", "a symlink", "a hard link"]


@pytest.mark.parametrize("how", TAMPERING)
def test_a_capture_record_someone_else_wrote_is_refused(tmp_path: Path, how: str) -> None:
    from mlrepro.runs import capture

    old = os.umask(0o002)  # the docs' advice for a team's shared folders
    try:
        out = tmp_path / "pipeline_info" / "captures" / "k.json"
        capture.write(capture.Record("config_X.sh", str(tmp_path), {"DGXNGPU": "8"}), out)
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o644 and capture.read(out).env == {"DGXNGPU": "8"}
    hostile = json.loads(out.read_text())
    hostile["env"]["BASH_ENV"] = "/home/attacker/payload.sh"
    _tampered(out, how, json.dumps(hostile))
    with pytest.raises(capture.CaptureError, match=r"k\.json: (written by uid 12345|writable by other users|"
                                                   r"a symlink|a file with 2 hard links).*not used|k\.json: a symlink"):
        capture.read(out)


@pytest.mark.parametrize("how", TAMPERING)
def test_a_launch_file_someone_else_wrote_is_refused(tmp_path: Path, how: str) -> None:
    launch = _hostile_launch(tmp_path, "true")
    path = tmp_path / "launch.json"
    launch.write(path)
    assert driver.read_launch(path) == launch
    _tampered(path, how, launch.to_json().replace('"env": {}', '"env": {"BASH_ENV": "/x.sh"}'))
    with pytest.raises(driver.RunFailed, match=r"launch\.json"):
        driver.read_launch(path)


def test_a_record_left_group_writable_by_an_older_version_is_written_anew(tmp_path: Path) -> None:
    launch = _hostile_launch(tmp_path, "true")
    path = tmp_path / "launch.json"
    path.write_text(launch.to_json())
    path.chmod(0o664)
    launch.write(path)
    assert path.stat().st_mode & 0o777 == 0o644 and driver.read_launch(path) == launch


# --- the lows: shared GPU lock folders, umask 002


def test_a_fifo_in_a_shared_gpu_lock_folder_is_refused_at_once(tmp_path: Path) -> None:
    from mlrepro.runs import accelerators

    shared = tmp_path / "locks"
    shared.mkdir()
    # root's sticky folder, as /run/lock, where this runs as root (CI); else the user's own (the same open path)
    shared.chmod(0o1777 if os.geteuid() == 0 else 0o700)
    os.mkfifo(shared / "gpu0.lock")
    folder = accelerators.lock_dir(str(shared))
    started = time.monotonic()
    with pytest.raises(accelerators.GpuError, match=r"gpu0\.lock: not a regular file"), \
            accelerators.claim(folder, 2, 1, timeout_s=5):
        pass
    assert time.monotonic() - started < 5


def test_a_gpu_lock_folder_in_a_world_writable_parent_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    from mlrepro.runs import accelerators

    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)
    with pytest.raises(accelerators.GpuError, match=r"parent .*open is writable by every user without the sticky"):
        accelerators.lock_dir(str(open_parent / "locks"))
    open_parent.chmod(0o1777)
    assert accelerators.lock_dir(str(open_parent / "locks")) == open_parent / "locks"


def test_under_umask_002_a_group_writable_cache_is_refused_with_the_fix(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from mlrepro.core import private_dir
    from mlrepro.runs import accelerators

    (tmp_path / ".cache").mkdir(mode=0o775)
    (tmp_path / ".cache").chmod(0o775)  # as a desktop session under umask 002 left it
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    with pytest.raises(accelerators.GpuError, match=rf"umask 002 is group-writable; `chmod go-w {tmp_path}/\.cache`"):
        accelerators.lock_dir(None)
    (tmp_path / ".cache").chmod(0o755)
    old = os.umask(0o002)
    try:  # the folders mlrepro makes are private whatever the umask
        made = accelerators.lock_dir(None)
    finally:
        os.umask(old)
    assert made.stat().st_mode & 0o777 == 0o700 and private_dir.base().stat().st_mode & 0o777 == 0o700


# --- Medium: a rootful engine gives a package's code no privilege


@pytest.fixture(scope="module")
def tiny_image(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """Podman's socket, and an image of this machine's dash, bash and a few tools with their libraries only (no
    registry here): built once for the tests of this file that run a container or build on it."""
    from mlrepro.engines.client import connect
    from tests.conftest import require

    socket = os.environ.get("MLREPRO_PODMAN_SOCKET")
    require(bool(socket), "MLREPRO_PODMAN_SOCKET is not set: start Podman's API with .ci/podman.sh")
    assert socket is not None
    return socket, _tiny_image(connect("podman", socket), tmp_path_factory.mktemp("tiny-image"))


def _tiny_image(client: Any, tmp_path: Path) -> str:
    import shutil

    ctx = tmp_path / "ctx"
    for tool in ("dash", "bash", "touch", "chmod", "ln", "cat"):
        src = Path(shutil.which(tool) or f"/bin/{tool}").resolve()
        (ctx / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy(src, ctx / "bin" / ("sh" if tool == "dash" else tool))
        libs = subprocess.run(["ldd", str(src)], capture_output=True, text=True, check=True).stdout
        for lib in re.findall(r"(/\S+\.so[.\d]*)", libs):
            dst = ctx / lib.lstrip("/")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(lib).resolve(), dst)
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY . /\n")
    client.images.build(path=str(ctx), tag="localhost/mlrepro-sec4-tiny:1", network_mode="none", rm=True)
    return "localhost/mlrepro-sec4-tiny:1"


@pytest.mark.integration
@pytest.mark.podman
def test_a_container_runs_without_privileges_and_its_setuid_file_is_defused(tiny_image: tuple[str, str],
                                                                             tmp_path: Path) -> None:
    from mlrepro.engines import Mount, get_engine

    socket, image = tiny_image
    engine = get_engine("podman", socket=socket)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = ('touch /results/tool && chmod 6755 /results/tool; '
              'while read l; do case "$l" in *" /results "*) echo "$l";; esac; done < /proc/mounts; '
              'while read l; do case "$l" in NoNewPrivs*|CapEff*) echo "$l";; esac; done < /proc/self/status')
    code = engine.run(["sh", "-c", script], image=image, mounts=[Mount(run_dir, read_only=False, target="/results")],
                      gpus=[], env={}, log=run_dir / "train.log")
    log = (run_dir / "train.log").read_text()
    assert code == 0, log
    assert re.search(r" /results \S+ \S*nosuid,nodev", log) and re.search(r"CapEff:\s+0+\n", log), log
    assert re.search(r"NoNewPrivs:\s+1", log), log
    found = untrusted_dir.planted(run_dir)
    assert found and "setuid or setgid file" in found[0] and "its bits removed" in found[0]
    assert (run_dir / "tool").stat().st_mode & 0o6000 == 0


@pytest.mark.integration
@pytest.mark.podman
def test_a_reproduced_package_image_builds_without_pulling(tiny_image: tuple[str, str], tmp_path: Path) -> None:
    from mlrepro.containers import BaseImageMissing
    from mlrepro.containers.build import build_image
    from mlrepro.engines.client import connect

    socket, base = tiny_image
    client = connect("podman", socket)
    folder = tmp_path / "impl"
    folder.mkdir()
    # built with network mode none (Docker honours it; Podman 4.3's builder, buildah, does not: docs/security.md)
    (folder / "Dockerfile").write_text(f"ARG FROM_IMAGE_NAME={base}\nFROM ${{FROM_IMAGE_NAME}}\nRUN touch /built\n")
    log = tmp_path / "build.log"
    record = build_image(client, "reproduce-sec4", tag_prefix="localhost/mlrepro-test-", log=log, folder=folder,
                         network=False)
    assert record["base_images"][0]["ref"] == base
    # a base image not in the engine's store is not pulled: the build stops, naming the key that allows it
    with pytest.raises(BaseImageMissing, match=r"may not use the network .*reproduce_build_network"):
        build_image(client, "reproduce-sec4", tag_prefix="localhost/mlrepro-test-", log=log, folder=folder,
                    network=False, build_args={"FROM_IMAGE_NAME": "registry.example/not-here:1"})


def test_a_job_log_left_as_a_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    """A step's log in an output folder someone else could write (or a package's code natively): made anew."""
    from mlrepro import jobs

    victim = tmp_path / "victim"
    victim.write_text("keep")
    for i, plant in enumerate((os.symlink, os.link)):
        log = tmp_path / f"step{i}.log"
        plant(victim, log)
        with jobs._logged(str(log)):
            os.write(1, b"the step's line\n")
        assert victim.read_text() == "keep" and "the step's line" in log.read_text() and not log.is_symlink()


def test_a_run_without_nvml_records_its_gpus_as_unknown_and_the_time_does_not_decide(tmp_path: Path) -> None:
    from mlrepro.reproduce import compare
    from mlrepro.runs import accelerators

    assert accelerators.identify("nvml", []) == {"count": 0, "devices": []}
    unknown = accelerators.identify(_trace(tmp_path, "NVIDIA H100 80GB HBM3", 80 << 30), [5])
    assert unknown["count"] == 1 and unknown["devices"] == [] and "does not see GPU [5]" in unknown["unknown"]
    same, why = compare.hardware_class({"accelerators_per_node": "1", "accelerator_model_name": "H100"}, [unknown])
    assert not same and "GPUs are unknown" in why


@pytest.mark.integration
@pytest.mark.podman
def test_links_planted_from_inside_a_container_change_no_file_of_the_host(tiny_image: tuple[str, str],
                                                                          tmp_path: Path) -> None:
    """High 1 as the issue found it: in a container the run folder is mounted read-write at /results; the package's
    run_and_time.sh plants links there to the auditor's files (host paths), which the host's driver would follow."""
    from mlrepro.core import atomic

    socket, image = tiny_image
    record = tmp_path / "image.json"
    atomic.write_json(record, {"engine": "podman", "socket": socket, "tag": image, "image": "tiny"})
    victims = _victims(tmp_path)
    before = _snapshot(victims)
    launch = _hostile_launch(tmp_path, f"ln -sf {victims['bashrc']} ledger.jsonl; ln -s {victims['keys']} run.json")
    folder = Path(launch.folder)
    launch = dataclasses.replace(launch, script_in_container=str(folder / "run_and_time.sh"), data_mount="/data",
                                 log_mount="/results", code=str(folder))
    run_dir = tmp_path / "runs" / "0"
    with pytest.raises((driver.RunFailed, PlantedLink), match="symlink"):
        driver.drive(launch, 1, run_dir, driver.Options(image_record=record, gpus="0",
                                                        gpu_locks=str(tmp_path / "locks")))
    assert (run_dir / "ledger.jsonl").is_symlink()  # planted from inside, and never followed
    assert _snapshot(victims) == before
