"""One run of one benchmark, as one Snakemake job: any implementation's ``run_and_time.sh``, once.

The launch spec (the run rule's params; the same as the unit's launch file) names the implementation folder, its
captured config and the dataset; the job gives the seed. The script runs through the configured engine with SEED,
DATADIR, LOGDIR and the config's variables in its environment, on GPUs no other run holds. Its whole output is the
run's log (``train.log``); its ``:::MLLOG`` lines, and only those, are ``result.txt``; ``run.json`` is derived from
``result.txt``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrepro.core import untrusted_dir
from mlrepro.core.errors import MlreproError
from mlrepro.core.hashing import sha256_file
from mlrepro.core.job import Job
from mlrepro.core.mllog_reader import mllog_lines, run_summary
from mlrepro.engines import Engine, Mount, engine_for, get_engine
from mlrepro.runs import ledger, runsub
from mlrepro.runs.accelerators import GpuError, allocated_gpus, claim, identify, lock_dir, machine_gpus
from mlrepro.runs.launch_spec import LaunchSpec, LaunchSpecError
from mlrepro.slurm import containers
from mlrepro.slurm import launch as launcher
from mlrepro.slurm.jobs import SLURM_RECORD, this_job

LOG = "train.log"
CHECKPOINT = "checkpoint.pt"  # a converged run's weights, served by the inference stage
MAX_LOG = 1 << 30  # bytes of a run's log read back (a real run logs megabytes)


class RunFailed(MlreproError, RuntimeError):
    pass


def _image_identity(record_path: Path, ref: str | None) -> dict[str, object]:
    record = json.loads(untrusted_dir.read_record(record_path, 1 << 20))
    return {"name": record["image"], "ref": ref, "tag": record.get("tag"), "id": record.get("id"),
            "repo_digests": record.get("repo_digests", []), "file": record.get("file")}


def launch_env(launch: LaunchSpec, seed: int, data_dir: str, log_dir: str) -> dict[str, str]:
    """The run's environment: the captured config, then what the driver sets (it wins)."""
    sub = launch.submission
    return {
        **launch.env,
        "SEED": str(seed), "DATADIR": data_dir, "LOGDIR": log_dir, "NEXP": "1",
        "MLPERF_SUBMISSION_ORG": sub["org"], "MLPERF_SUBMISSION_PLATFORM": sub["platform"],
        "MLPERF_SUBMISSION_DIVISION": sub["division"], "MLPERF_SUBMISSION_STATUS": sub["status"],
        "OMP_NUM_THREADS": str(launch.threads), "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1",
        **({"MLREPRO_PARAMS": json.dumps(launch.params, sort_keys=True), "MLREPRO_DEVICE": launch.device}
           if launch.kind == "mini" else {}),
        **({"MLREPRO_DROP_CACHES": "1"} if launch.drop_caches else {}),
    }


def execute(engine: Engine, launch: LaunchSpec, seed: int, image: str | None, run_dir: Path, log: Path,
            gpus: list[int], roots: Path | None = None) -> int:
    """Start run_and_time.sh once: natively in its folder, or in the image with data and logs mounted."""
    data = Path(launch.data_dir)
    processes = launch.nodes * launch.tasks_per_node
    workdir: str | None
    if engine.name == "native":
        argv = ["bash", str(Path(launch.folder) / "run_and_time.sh")]
        env, mounts, workdir = launch_env(launch, seed, str(data), str(run_dir)), [], launch.folder
        # ours may start from this invocation's warm parent (mlrepro/runs/warm.py); ranks of a multi-process run
        # start cold, each from its launcher
        if launch.kind == "mini" and processes == 1:
            from mlrepro.runs import warm
            env.update(warm.shim_env(os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])))
    else:
        argv = ["bash", str(launch.script_in_container)]
        env = launch_env(launch, seed, str(launch.data_mount), str(launch.log_mount))
        mounts = [Mount(data, read_only=True, target=launch.data_mount),
                  Mount(run_dir, read_only=False, target=launch.log_mount)]
        workdir = None
        if launch.code:  # code from the host (a reproduced package's staged copy): read-only, run in place
            mounts.append(Mount(Path(launch.code), read_only=True))
            workdir = launch.folder
    if processes > 1:  # one run, several processes: srun inside a Slurm allocation, torchrun elsewhere
        argv, env, image, mounts, engine = _multi_process(engine, launch, image, argv, env, mounts, workdir, run_dir,
                                                           log)
    try:
        def started(pid: int) -> None:  # the sampler measures the container's processes too
            if roots is not None:
                untrusted_dir.write_text(run_dir, roots.relative_to(run_dir), f"{pid}\n")

        return engine.run(argv, image=image, mounts=mounts, gpus=gpus, env=env, log=log, workdir=workdir,
                          started=started)
    except Exception as e:  # the engine's own errors (API, missing image) as one clear message
        raise RunFailed(f"{launch.benchmark} run in {run_dir}: engine {engine.name} could not start "
                        f"{argv[-1]} (image {image}): {type(e).__name__}: {e}") from e


def execute_run_sub(launch: LaunchSpec, seed: int, cont: str, run_dir: Path, log: Path, roots: Path | None) -> int:
    """One experiment of the folder's own run.sub (NEXP=1), run by bash in its folder inside this run's Slurm
    allocation, as the folder's README launches it; its output (every step's) is the run's log."""
    if not launcher.in_allocation(os.environ):
        raise RunFailed(f"{launch.benchmark}: {launch.run_sub} starts its steps with srun and needs a Slurm "
                        "allocation; run it through `snakemake --profile profiles/slurm`")
    folder = Path(launch.folder)
    try:  # the environment sbatch gives run.sub, submitted from its folder as its README submits it
        slurm = launcher.batch_env(os.environ, folder)
        found = launcher.script_folder(os.environ, folder)
    except launcher.LaunchError as e:
        raise RunFailed(f"{launch.benchmark} run in {run_dir}: {e}") from e
    if found != folder.resolve() and "scontrol show job" in Path(launch.run_sub).read_text(errors="replace"):
        raise RunFailed(f"{launch.benchmark}: {launch.run_sub} finds its folder through `scontrol show job` "
                        f"(Command=), which names {found} for this job, not {folder}: the Slurm executor plugin "
                        "submitted a script file; run its jobs with --wrap (the plugin's default)")
    env = {**os.environ, **slurm, **runsub.environment(launch, seed, str(run_dir), cont)}
    with os.fdopen(untrusted_dir.create(run_dir, log.name), "wb") as out:
        proc = subprocess.Popen(["bash", str(launch.run_sub)], cwd=launch.folder, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT)
        if roots is not None:
            untrusted_dir.write_text(run_dir, roots.relative_to(run_dir), f"{proc.pid}\n")
        return proc.wait()


def _multi_process(engine: Engine, launch: LaunchSpec, image: str | None, argv: list[str], env: dict[str, str],
                   mounts: list[Mount], workdir: str | None, run_dir: Path, log: Path
                   ) -> tuple[list[str], dict[str, str], str | None, list[Mount], Engine]:
    """The launcher's command for the run's ranks, run natively (srun or torchrun start the ranks, each in the
    container where there is one), after its set-up steps (cache clearing on every node, pyxis' image import)."""
    container = None
    if engine.name != "native":
        container = launcher.Container(engine.name, str(image), containers.container_name(launch.benchmark, run_dir),
                                       mounts, bool(launch.gpus), workdir)
    try:
        plan = launcher.command(argv, sys.executable, launch.nodes, launch.tasks_per_node, launch.threads, os.environ,
                                container, launch.drop_caches)
    except (launcher.LaunchError, ValueError) as e:
        raise RunFailed(f"{launch.benchmark} run in {run_dir}: {e}") from e
    native = get_engine("native")
    env = {**env, **plan.env}
    for step in plan.setup:
        code = native.run(step, image=None, mounts=[], gpus=[], env=env, log=log, workdir=workdir)
        if code != 0:
            raise RunFailed(f"{launch.benchmark} run in {run_dir}: its set-up step `{' '.join(step)}` exited with "
                            f"status {code}; its log is kept at {log}. Last lines:\n{_tail(log)}")
    return plan.argv, env, None, [], native


def _read_log(log: Path) -> str:
    """The run's log, written by its code: read without following a link, bounded."""
    try:
        return untrusted_dir.read_bytes(log.parent, log.name, MAX_LOG).decode(errors="replace")
    except (FileNotFoundError, untrusted_dir.PlantedLink) as e:
        raise RunFailed(f"the run's log {log} cannot be read: {e}") from None


def _tail(log: Path, n: int = 15) -> str:
    return "".join(_read_log(log).splitlines(keepends=True)[-n:])


def collect(launch: LaunchSpec, run_dir: Path, log: Path, code: int) -> dict[str, Any]:
    """result.txt from the log's :::MLLOG lines and the run's summary; RunFailed naming the log otherwise."""
    script = launch.run_sub or f"{launch.folder}/run_and_time.sh"
    what = f"{launch.benchmark} run in {run_dir} ({script})"
    if code != 0:
        # a run of several processes fails whole (srun --kill-on-bad-exit): srun names the tasks and nodes that failed
        failed = launcher.failed_tasks(_read_log(log))
        where = f" ({'; '.join(failed[:4])})" if failed else ""
        raise RunFailed(f"{what} exited with status {code}{where}; its log is kept at {log}. Last lines:\n{_tail(log)}")
    lines = mllog_lines(_read_log(log))
    if not lines:
        raise RunFailed(f"{what} printed no :::MLLOG lines, so there is no result; its log is {log}. An "
                        "implementation logs with mlperf_logging's mllog to stdout (or prints its log file)")
    # checked in a private folder of ours, not in the run folder (which the run's code could have filled with links)
    with tempfile.TemporaryDirectory(prefix="mlrepro-result-") as tmp:
        partial = Path(tmp) / "result.txt"
        partial.write_text("".join(lines))
        try:
            summary = run_summary(partial)
        except ValueError as e:
            raise RunFailed(f"{what} logged no complete run ({str(e).split(': ', 1)[-1]}): a run without run_stop "
                            f"failed; its log is {log}. Last lines:\n{_tail(log)}") from None
    untrusted_dir.write_text(run_dir, "result.txt", "".join(lines))
    return summary


@dataclass(frozen=True)
class Options:
    """How the run's job runs it: not what the run computes (that is the launch spec's and the seed's)."""

    image_record: Path | None = None  # container engines: the image's build record (it names engine and socket)
    locked: bool = False  # run the locked image id; refuse a mismatch
    gpu_locks: str | None = None  # this host's per-GPU lock folder (config gpu_lock_dir); None: the user's own
    gpus: str = "auto"  # outside Slurm, the GPUs of this machine that runs share (config gpus); auto: NVML's
    telemetry_hz: float = 0.0  # 0 disables the sampler
    telemetry_backend: str = "nvml"  # nvml, or replay:TRACE.json (tests and demos)
    sqsh_record: Path | None = None  # a registry image's import record (its .sqsh is the run's CONT)


def drive(launch: LaunchSpec, seed: int, run_dir: Path, options: Options) -> None:
    """One run of ``launch``'s benchmark with ``seed`` into ``run_dir``, on record in the run ledger."""
    # a relative dataset folder (the generated one, under a relative outdir) is the working folder's, where runs start
    launch = dataclasses.replace(launch, data_dir=str(Path(launch.data_dir).resolve()))
    run_dir = run_dir.resolve()
    with ledger.recorded(run_dir, benchmark=launch.benchmark, seed=seed):  # every launch, on record
        _drive(options, launch, seed, run_dir)


def job(job: Job) -> None:
    """The run rule's job: params launch (the LaunchSpec as a JSON object), seed, run_dir, locked, gpu_locks, gpus, hz,
    backend; input image (its build record; none natively). Run in the job's own process (no warm parent: the driver
    imports no torch); a run of ours starts from the training's warm parent (:func:`execute`)."""
    try:  # typed: a misspelt or missing key is named before anything starts
        launch = LaunchSpec.from_dict(job.params["launch"], f"the launch spec of rule {job.rule}")
    except LaunchSpecError as e:
        raise RunFailed(str(e)) from None
    drive(launch, int(job.params["seed"]), Path(job.params["run_dir"]), _options(job))


def _options(job: Job) -> Options:
    p = job.params
    return Options(job.input.get("image"), bool(p["locked"]), p["gpu_locks"], str(p["gpus"]), float(p["hz"]),
                   p["backend"], job.input.get("sqsh"))


def read_launch(path: Path) -> LaunchSpec:
    """The launch file at ``path``, typed: a misspelt or missing key is named before anything starts."""
    try:
        return LaunchSpec.read(path)
    except (OSError, LaunchSpecError) as e:
        raise RunFailed(f"launch file {path}: {e}") from None


def main(argv: list[str] | None = None) -> None:
    """``python -m mlrepro.runs.driver --launch FILE``: a run of a launch file (the pipeline's, or one written by
    hand), outside Snakemake."""
    p = argparse.ArgumentParser(prog="python -m mlrepro.runs.driver", description=__doc__)
    p.add_argument("--launch", type=Path, required=True,
                   help="a launch file: a LaunchSpec (mlrepro/runs/launch_spec.py)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--engine", default="native", choices=["native"], help="without an image record: native")
    p.add_argument("--image-record", type=Path, default=None)
    p.add_argument("--locked", action="store_true")
    p.add_argument("--gpu-locks", default=None)
    p.add_argument("--gpus", default="auto")
    p.add_argument("--telemetry-hz", type=float, default=0.0)
    p.add_argument("--telemetry-backend", default="nvml")
    args = p.parse_args(argv)
    drive(read_launch(args.launch), args.seed, args.run_dir,
          Options(args.image_record, args.locked, args.gpu_locks, args.gpus, args.telemetry_hz, args.telemetry_backend))


@contextmanager
def _gpus(options: Options, launch: LaunchSpec) -> Iterator[list[int]]:
    """The run's GPUs on this node, from the machine that runs it: in a Slurm allocation the job's own (no lock:
    Slurm keeps jobs apart); elsewhere this machine's, each held by its lock in this host's lock folder. Ours with
    device auto takes one where there is one."""
    nodes = max(1, launch.nodes)
    need = -(-launch.gpus // nodes)  # per node
    optional = launch.kind == "mini" and launch.device == "auto"
    try:
        if launcher.in_allocation(os.environ):
            here = allocated_gpus(os.environ)
            need = min(need, len(here)) if optional else need
            if need > len(here):
                raise GpuError(f"the run needs {need} GPUs per node and Slurm gave this job {len(here)} on this node "
                               "(its GRES); the run rule asks for gres=gpu:<DGXNGPU>: is the partition's GRES set?")
            yield here[:need]
            return
        total = machine_gpus() if options.gpus == "auto" else int(options.gpus)
        need = min(need, total) if optional else need
        if need == 0:
            yield []
            return
        with claim(lock_dir(options.gpu_locks), total, need) as gpus:
            yield gpus
    except GpuError as e:
        raise RunFailed(f"{launch.benchmark}: {e}") from None


def _drive(options: Options, launch: LaunchSpec, seed: int, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / LOG
    # the run's code writes into its folder (in a container too): each entry the driver writes is replaced or made
    # anew, never opened through what was there (mlrepro/core/untrusted_dir.py)
    untrusted_dir.unlink(run_dir, "result.txt")
    untrusted_dir.unlink(run_dir, CHECKPOINT)  # a re-run that does not converge must not keep old weights
    os.close(untrusted_dir.create(run_dir, LOG))  # the engine appends to it
    slurm_job = this_job(os.environ)
    if slurm_job is not None:  # kept when the job is cancelled or times out: which Slurm job this attempt was
        untrusted_dir.write_json(run_dir, SLURM_RECORD, slurm_job)
    run_sub = bool(launch.run_sub)
    if options.sqsh_record:  # the system's import of its registry image: the file it recorded, or no run
        from mlrepro.containers import sqsh

        try:
            sqsh.verify(Path(str(launch.container)), Path(options.sqsh_record))
        except sqsh.SqshError as e:
            raise RunFailed(f"{launch.benchmark} run in {run_dir}: {e}") from None
    record_path = options.image_record
    engine = get_engine("native") if run_sub else engine_for("native", record_path)
    image = None
    if record_path:
        from mlrepro.containers.lock import image_ref  # the Docker SDK only where a container runs

        image = image_ref(record_path, locked=options.locked)
    sampler = nodes = None
    hz, backend = options.telemetry_hz, options.telemetry_backend
    with _gpus(options, launch) as gpus:
        roots = None
        if hz > 0:
            from mlrepro.telemetry import start_sampler
            from mlrepro.telemetry.host import ROOTS_ENV

            roots = run_dir / "telemetry" / "container.pids"
            untrusted_dir.unlink(run_dir, roots.relative_to(run_dir))
            os.environ[ROOTS_ENV] = str(roots)  # the sampler inherits it
            # forked, not a new interpreter, where fork may copy this process (no other thread: a job's never has)
            sampler = start_sampler(run_dir / "telemetry", hz=hz, watch_pid=os.getpid(), backend=backend,
                                    fork=threading.active_count() == 1)
            from mlrepro.telemetry.nodes import start_for_run  # a run over several nodes: a sampler on each other

            nodes = start_for_run(run_dir / "telemetry", os.environ, launch.nodes, hz, backend)
        wall_start, clock_start = time.time(), time.monotonic()  # the launch's window, by our clock
        try:
            if run_sub:
                code = execute_run_sub(launch, seed, launch.container or str(image or ""), run_dir, log, roots)
            else:
                code = execute(engine, launch, seed, image, run_dir, log, gpus, roots)
        finally:
            for handle in (nodes, sampler):
                if handle is not None:
                    handle.stop()
        wall = {"start_ms": int(wall_start * 1000), "stop_ms": int(time.time() * 1000),
                "seconds": round(time.monotonic() - clock_start, 3)}
    if found := untrusted_dir.planted(run_dir):  # before the driver reads or writes anything of the run again
        raise RunFailed(f"{launch.benchmark} run in {run_dir}: its code left entries that mlrepro never makes in a "
                        f"run folder, which could make the pipeline read or write a file elsewhere: "
                        f"{'; '.join(found[:10])}. The run is not used and nothing was written through them; "
                        "inspect and remove them (reproduce untrusted packages in a container)")
    summary = collect(launch, run_dir, log, code)
    record: dict[str, Any] = {
        "benchmark": launch.benchmark, **summary,
        "seed": summary["seed"] if summary["seed"] is not None else seed,
        "result_sha256": sha256_file(run_dir / "result.txt"),
        # run.sub starts its containers itself (srun --container-*: pyxis)
        "engine": "pyxis (run.sub)" if run_sub else engine.name, "gpus": gpus,
        "image": _image_identity(record_path, image) if record_path else None,
        "implementation": {"kind": launch.kind, "name": launch.name, "folder": launch.folder,
                           "config_file": launch.config_file},
        "processes": launch.nodes * launch.tasks_per_node,
        "slurm": slurm_job,
        "launcher": "run.sub" if run_sub else "mlrepro",
        # by the driver, not the run's code: when its code ran (its log's times must lie inside), and on what
        "wall": wall, "accelerators": identify(options.telemetry_backend, gpus),
    }
    if run_sub:  # what the run.sub ran in; its steps' own task counts are in its log (and the launch preview)
        alloc = launch.allocation
        record["allocation"] = {"nodes": alloc.get("nodes"), "gpus_per_node": alloc.get("gpus_per_node"),
                                "node_list": (slurm_job or {}).get("node_list")}
        # the allocation's first node as NVML and /sys see it: what its system description is made from
        from mlrepro.core import probe

        record["node"] = {**probe.host(), "sockets": probe.sockets()}
    if (run_dir / CHECKPOINT).is_file():
        record["checkpoint"] = {"file": CHECKPOINT, "sha256": sha256_file(run_dir / CHECKPOINT)}
    record["peak_rss_mb"] = 0.0
    if sampler is not None:
        from mlrepro.telemetry import summarize

        record["telemetry"] = summarize(run_dir / "telemetry", summary["run_start_ms"], summary["run_stop_ms"])
        record["peak_rss_mb"] = ((record["telemetry"] or {}).get("host") or {}).get("peak_rss_mb") or 0.0
    untrusted_dir.write_json(run_dir, "run.json", record)


if __name__ == "__main__":
    try:
        main()
    except RunFailed as e:
        sys.exit(f"error: {e}")
