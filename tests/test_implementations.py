"""Implementations as plug-in folders: NVIDIA's eight v1.1 folders planned, an outside one run, runs on
their own accelerators, re-runs exact, bad input named."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mlrepro import config as mlconfig
from mlrepro.runs import capture_job
from mlrepro.runs.capture import CLEAN_ENV, CaptureError, source_native
from mlrepro.runs.implementation import captured
from tests.conftest import REPO, SYSTEM, snakemake

OUTSIDE = REPO / "tests" / "fixtures" / "outside_impl"
SINGLE_NODE = {"bert": "config_DGXA100_1x8x56x1.sh", "dlrm": "config_DGXA100.sh", "maskrcnn": "config_DGXA100.sh",
               "minigo": "config_DGXA100.sh", "resnet": "config_DGXA100.sh", "rnnt": "config_DGXA100_1x8x256x1.sh",
               "ssd": "config_DGXA100_1x8x114.sh", "unet3d": "config_DGXA100_1x8x7.sh"}


def _bash_reference(config: Path) -> dict[str, str]:
    """``bash -c 'source <config> && env'`` in the same clean environment, less what bash alone sets."""
    def env(script: str) -> dict[str, str]:
        out = subprocess.run(["bash", "-c", script], cwd=config.parent, env=CLEAN_ENV, capture_output=True,
                             text=True, check=True).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith(" "))
    base = env("env")
    return {k: v for k, v in env(f"source {shlex.quote(str(config))} && env").items()
            if k != "_" and base.get(k) != v}


def _folders(nvidia: Path) -> dict[str, Path]:
    found = {}
    for bm in SINGLE_NODE:
        (folder,) = [p for p in (nvidia / bm / "implementations").iterdir() if (p / "run_and_time.sh").is_file()]
        found[bm] = folder
    return found


def test_nvidia_configs_are_captured_as_bash_sources_them(nvidia_benchmarks: Path) -> None:
    configs = sorted(nvidia_benchmarks.glob("*/implementations/*/config_DGXA100*.sh"))
    assert len(configs) >= 30
    for config in configs:
        ours, reference = source_native(config).env, _bash_reference(config)
        assert reference.items() <= ours.items(), config
        assert "DGXNGPU" in ours and ("DGXSYSTEM" in ours or "common" in config.name), config


def test_nvidia_job_shapes_come_from_each_config(nvidia_benchmarks: Path, tmp_path: Path) -> None:
    for bm, folder in _folders(nvidia_benchmarks).items():
        for config in sorted(folder.glob("config_DGXA100*.sh")):
            if "common" in config.name:
                continue
            raw = {"allow_fewer_runs": True, "only": [bm], "benchmarks": {bm: {
                "implementation": str(folder), "system_config": config.name, "data_dir": str(tmp_path)}}}
            _, benchmarks = mlconfig.load(raw)
            impl, env = benchmarks[bm].implementation, source_native(config).env
            assert impl.config_file == config
            shape = captured(env, impl.config_file, impl.folder, impl.kind)
            assert (shape.nodes, shape.gpus_per_node) == (int(env.get("DGXNNODES", 1)), int(env["DGXNGPU"])), config
            assert shape.walltime_minutes is None or shape.walltime_minutes > 0


@pytest.mark.integration
def test_nvidia_folders_are_planned_with_their_own_image_and_shape(nvidia_benchmarks: Path, tmp_path: Path) -> None:
    folders = _folders(nvidia_benchmarks)
    cfg = {"engine": "podman", "engine_socket": "unix:///nonexistent.sock", "benchmarks": {
        bm: {"implementation": str(folder), "system_config": SINGLE_NODE[bm], "data_dir": str(tmp_path)}
        for bm, folder in folders.items()}}
    path = tmp_path / "nvidia.yaml"
    path.write_text(yaml.safe_dump(cfg))

    def runs_of(text: str, bm: str) -> list[str]:
        return re.findall(rf"rule run:\n(?:    .*\n)*?    output: results/runs/{SYSTEM}/{bm}/\d+/result\.txt.*\n"
                          r"(?:    .*\n)*?    resources: (.*)", text)

    # before their config files are captured (by the capture jobs of a real run), the runs' shapes are <TBD>
    out = snakemake(tmp_path, "--configfile", str(path), "-n", "--resources", "gpus=8")
    text = out.stdout + out.stderr
    assert text.count("rule capture:") == len(folders)
    for bm in folders:
        runs = runs_of(text, bm)
        assert len(runs) == mlconfig.rulesets.required_runs(bm, "training") and all("gpus=<TBD>" in r for r in runs)
    snakemake(tmp_path, "--configfile", str(path), "--until", "capture")  # sources the config files, no more
    out = snakemake(tmp_path, "--configfile", str(path), "-n", "--resources", "gpus=8")
    text = out.stdout + out.stderr
    for bm, folder in folders.items():
        image = f"{bm}-{folder.name}".lower()
        assert f"output: results/containers/{image}.json" in text, bm
        runs = runs_of(text, bm)
        config = source_native(folder / SINGLE_NODE[bm]).env
        assert len(runs) == mlconfig.rulesets.required_runs(bm, "training"), bm
        assert all(f"gpus={int(config['DGXNGPU'])}, nodes=1" in r for r in runs), (bm, runs[:1])


def _echo_impl(folder: Path, gpus: int = 0, mllog: bool = True) -> Path:
    """A tiny implementation folder whose run prints a complete MLPerf log and records its GPUs."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config_CPU.sh").write_text(f"export DGXNNODES=1\nexport DGXNGPU={gpus}\nexport WALLTIME=5\n")
    (folder / "Dockerfile").write_text("ARG FROM_IMAGE_NAME=localhost/none\nFROM ${FROM_IMAGE_NAME}\n")
    log = "\n".join(
        f"""printf ':::MLLOG {{"namespace": "", "time_ms": %s, "event_type": "{t}", "key": "{k}", "value": null, """
        f""""metadata": {{"status": "success", "epoch_num": 1}}}}\\n' "$(date +%s%3N)" """
        for t, k in (("INTERVAL_START", "run_start"), ("INTERVAL_END", "run_stop"))) if mllog else "echo no log"
    (folder / "run_and_time.sh").write_text(
        "#!/bin/bash\nset -e\nstart=$(date +%s.%N)\nsleep 0.5\n" + log + "\n"
        'echo "$start $(date +%s.%N) ${CUDA_VISIBLE_DEVICES:-none}" > "$LOGDIR/gpus.txt"\n')
    return folder


def _echo_config(tmp_path: Path, name: str, runs: dict[str, int], gpus: int = 0, machine: int = 0) -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    impl = _echo_impl(tmp_path / "impl", gpus)
    cfg = {"allow_fewer_runs": True, "gpus": machine, "telemetry": {"enabled": False}, "only": sorted(runs),
           "benchmarks": {bm: {"implementation": str(impl), "system_config": "config_CPU.sh", "data_dir": "data",
                               "runs": n} for bm, n in runs.items()}}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run_targets(runs: dict[str, int]) -> list[str]:
    return [f"results/runs/{SYSTEM}/{bm}/{i}/run.json" for bm, n in runs.items() for i in range(n)]


@pytest.mark.integration
def test_adding_a_run_schedules_exactly_one_new_run(tmp_path: Path) -> None:
    snakemake(tmp_path, *_run_targets({"resnet": 3}), "--configfile",
              str(_echo_config(tmp_path, "three.yaml", {"resnet": 3})))
    dry = snakemake(tmp_path, *_run_targets({"resnet": 4}), "-n", "--configfile",
                    str(_echo_config(tmp_path, "four.yaml", {"resnet": 4})))
    text = dry.stdout + dry.stderr
    assert re.search(r"^run\s+1$", text, re.M), text[-3000:]
    assert f"output: results/runs/{SYSTEM}/resnet/3/result.txt" in text
    record = json.loads((tmp_path / f"results/runs/{SYSTEM}/resnet/0/run.json").read_text())
    assert record["status"] == "success" and record["implementation"]["kind"] == "folder"
    assert record["result_sha256"] and record["time_to_train_ms"] >= 0

    def scheduled_runs(config: Path) -> int:
        out = snakemake(tmp_path, *_run_targets({"resnet": 4}), "-n", "--configfile", str(config))
        found = re.search(r"^run\s+(\d+)$", out.stdout + out.stderr, re.M)
        return int(found.group(1)) if found else 0

    # a moved implementation folder (same content) is a pipeline key: still only the new run
    shutil.copytree(tmp_path / "impl", tmp_path / "moved")
    moved = yaml.safe_load((tmp_path / "four.yaml").read_text())
    moved["benchmarks"]["resnet"]["implementation"] = str(tmp_path / "moved")
    (tmp_path / "moved.yaml").write_text(yaml.safe_dump(moved))
    assert scheduled_runs(tmp_path / "moved.yaml") == 1
    # the config file's content is not: every run again
    with (tmp_path / "moved" / "config_CPU.sh").open("a") as f:
        f.write("export LR=0.2\n")
    assert scheduled_runs(tmp_path / "moved.yaml") == 4


def _intervals(workdir: Path, runs: dict[str, int]) -> list[tuple[float, float, set[str]]]:
    out = []
    for bm, n in runs.items():
        for i in range(n):
            start, stop, devices = (workdir / f"results/runs/{SYSTEM}/{bm}/{i}/gpus.txt").read_text().split()
            out.append((float(start), float(stop), set(devices.split(","))))
    return out


@pytest.mark.integration
def test_one_gpu_is_never_shared_by_two_runs(tmp_path: Path) -> None:
    runs = {"resnet": 2, "bert": 2}
    snakemake(tmp_path, *_run_targets(runs), "--cores", "4", "--resources", "gpus=1", "--configfile",
              str(_echo_config(tmp_path, "one.yaml", runs, gpus=1, machine=1)))
    spans = sorted(_intervals(tmp_path, runs))
    assert all(devices == {"0"} for _, _, devices in spans)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


@pytest.mark.integration
def test_concurrent_runs_get_disjoint_gpus(tmp_path: Path) -> None:
    runs = {"resnet": 3, "bert": 3}
    snakemake(tmp_path, *_run_targets(runs), "--cores", "8", "--resources", "gpus=8", "--configfile",
              str(_echo_config(tmp_path, "eight.yaml", runs, gpus=2, machine=8)))
    spans = _intervals(tmp_path, runs)
    assert all(len(devices) == 2 and devices <= {str(i) for i in range(8)} for _, _, devices in spans)
    overlapping = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:] if a[0] < b[1] and b[0] < a[1]]
    assert overlapping, "no two runs overlapped: the test shows nothing"
    assert all(not (a[2] & b[2]) for a, b in overlapping), overlapping


def _points(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 4))
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(int)
    y[rng.random(512) < 0.08] ^= 1  # label noise: accuracy stays below 1.0, as the open division asks
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "points.npz", x=x, y=y)
    return folder


@pytest.mark.integration
def test_outside_implementation_runs_natively_and_its_package_passes(tmp_path: Path) -> None:
    _points(tmp_path / "data")
    cfg = {"telemetry": {"enabled": False}, "only": ["resnet"], "benchmarks": {"resnet": {
        "implementation": str(OUTSIDE), "system_config": "config_CPU.sh", "data_dir": "data"}}}
    (tmp_path / "outside.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(tmp_path, "--configfile", str(tmp_path / "outside.yaml"))
    org = tmp_path / "results" / "submission" / "mlrepro"
    out = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(org), "training", "2.0.0",
                          "--log_output", str(tmp_path / "pc.log")], capture_output=True, text=True, check=True)
    assert "PACKAGE CHECKER FOUND NO ERRORS" in out.stdout + out.stderr
    held = org / "benchmarks" / "resnet" / "implementations" / "outside_impl"
    files = sorted(p.relative_to(held).as_posix() for p in held.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(OUTSIDE).as_posix() for p in OUTSIDE.rglob("*") if p.is_file())
    run = json.loads((tmp_path / f"results/runs/{SYSTEM}/resnet/0/run.json").read_text())
    assert run["status"] == "success" and 0 < run["final_metric"] < 1 and run["metrics"]
    assert "RESULT,outside," in (tmp_path / f"results/runs/{SYSTEM}/resnet/0/train.log").read_text()
    assert "RESULT" not in (tmp_path / f"results/runs/{SYSTEM}/resnet/0/result.txt").read_text()
    report = (tmp_path / "results" / "report.html").read_text()
    assert "config_CPU.sh" in report and "BATCHSIZE" in report


# Bad input: one paragraph naming the file and what to do, before any run starts.

def _load(tmp_path: Path, **block: Any) -> None:
    mlconfig.load({"allow_fewer_runs": True, "only": ["resnet"], "benchmarks": {"resnet": block}},
                  base_dir=tmp_path)


def test_folder_without_run_and_time_is_named(tmp_path: Path) -> None:
    impl = _echo_impl(tmp_path / "impl")
    (impl / "run_and_time.sh").unlink()
    (tmp_path / "d").mkdir()
    with pytest.raises(mlconfig.ConfigError, match=rf"{impl}: no run_and_time.sh"):
        _load(tmp_path, implementation="impl", data_dir="d")


def test_failing_and_missing_config_files_are_named_with_stderr(tmp_path: Path) -> None:
    impl = _echo_impl(tmp_path / "impl")
    (tmp_path / "d").mkdir()
    (impl / "config_BAD.sh").write_text("echo 'this config is broken' >&2\nexit 3\n")
    _load(tmp_path, implementation="impl", data_dir="d", system_config="config_BAD.sh")  # planning sources nothing
    with pytest.raises(CaptureError, match=r"config_BAD.sh: sourcing it with bash failed \(exit 3\)"
                                           r":\nthis config is broken\nFix the config file"):
        capture_job.capture(impl / "config_BAD.sh", tmp_path / "record.json", [])  # its capture job
    assert not (tmp_path / "record.json").exists()
    with pytest.raises(mlconfig.ConfigError, match=r"config_NONE.sh: no such config file.*config_BAD.sh"):
        _load(tmp_path, implementation="impl", data_dir="d", system_config="config_NONE.sh")


def test_missing_dataset_mount_source_is_named(tmp_path: Path) -> None:
    _echo_impl(tmp_path / "impl")
    with pytest.raises(mlconfig.ConfigError, match=rf"benchmarks.resnet.data_dir: {tmp_path}/nowhere does not exist"):
        _load(tmp_path, implementation="impl", data_dir="nowhere")


def test_dockerfile_without_base_is_named(tmp_path: Path) -> None:
    from mlrepro.containers import BaseImageMissing
    from mlrepro.containers.build import build_image

    impl = _echo_impl(tmp_path / "impl")
    (impl / "Dockerfile").write_text("# no FROM at all\nCOPY . .\n")
    with pytest.raises(BaseImageMissing, match=r"Dockerfile: names no base image"):
        build_image(None, "x", folder=impl, log=tmp_path / "build.log")
    (tmp_path / "d").mkdir()
    with pytest.raises(mlconfig.ConfigError, match=rf"{impl}/Dockerfile names no base image"):  # before any job
        mlconfig.load({"engine": "podman", "only": ["resnet"], "allow_fewer_runs": True,
                       "benchmarks": {"resnet": {"implementation": "impl", "data_dir": "d",
                                                 "system_config": "config_CPU.sh"}}}, base_dir=tmp_path)


@pytest.mark.integration
def test_run_without_mllog_lines_fails_naming_its_log(tmp_path: Path) -> None:
    cfg = _echo_config(tmp_path, "quiet.yaml", {"resnet": 1})
    (tmp_path / "impl" / "run_and_time.sh").write_text("#!/bin/bash\necho training, but no log\n")
    out = snakemake(tmp_path, *_run_targets({"resnet": 1}), "--configfile", str(cfg), check=False)
    log = (tmp_path / f"results/pipeline_info/logs/run_{SYSTEM}_resnet_0.log").read_text()
    assert out.returncode != 0
    assert "printed no :::MLLOG lines" in log
    assert str(tmp_path / f"results/runs/{SYSTEM}/resnet/0/train.log") in log
    assert not (tmp_path / f"results/runs/{SYSTEM}/resnet/0/result.txt").exists()
    assert os.path.exists(tmp_path / f"results/runs/{SYSTEM}/resnet/0/train.log")


def test_host_telemetry_follows_a_container_init_that_is_no_descendant(tmp_path: Path) -> None:
    """Under docker/podman the training runs under the engine, not under the driver: its pid file counts."""
    from mlrepro.telemetry.host import HostSampler

    # an orphan (its parent shell has exited): not in this process's tree, as a container's init is not. It writes
    # 8 MB before it sleeps: the kernel's RSS counters of a process that only sleeps can lag at 0 (seen under CI's
    # load: both samples equal), and are synced by its page faults; sampled once its memory shows.
    orphan = int(subprocess.run(
        ["bash", "-c", "python3 -c 'import time; b = b\"x\" * (8 << 20); time.sleep(30)' >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True).stdout)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and int(Path(f"/proc/{orphan}/statm").read_text().split()[1]) < 1024:
            time.sleep(0.01)
        roots = tmp_path / "container.pids"
        alone = HostSampler(os.getpid(), roots_file=str(roots)).read()
        roots.write_text(f"{orphan}\n")
        both = HostSampler(os.getpid(), roots_file=str(roots)).read()
        assert both["proc_count"] == alone["proc_count"] + 1
        assert both["proc_rss_bytes"] > alone["proc_rss_bytes"]
    finally:
        os.kill(orphan, 9)
