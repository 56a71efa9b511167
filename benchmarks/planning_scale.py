"""Planning at scale: a submission of 10 systems x 8 benchmarks from NVIDIA's v1.1 implementation folders.

Usage: python benchmarks/planning_scale.py [--tarball FILE] [--repeat N] [--workdir DIR] [--json OUT]

NVIDIA's eight v1.1 folders (../shared/data/mlperf_training_nvidia_implementations_v1.1.tar.xz) are unpacked;
their config files cover 1 to 540 nodes. System k runs every benchmark with that benchmark's k-th config file
(by node count, cycling), so the 80 (system, benchmark) units span every shape the folders define; each runs
the ruleset's count (1.1.0: 90 runs per system, 900 in all). Targets (issue 26, item 6):

* planning: ``snakemake -n`` in an empty folder, at most 10 s (median of ``--repeat``): nothing is captured yet, so
  that the runs' shapes and launch specs are ``<TBD>`` (the capture jobs are in the plan);
* no-op: the same submission with every output present: the config files captured by their jobs (a real
  ``snakemake --until capture``: about 80 bash runs, as a first real run makes them), the other outputs written by
  this script in the shape the pipeline's planning checks read, then ``snakemake --touch``, which records them as
  Snakemake's own; within 1.3x a bare
  Snakefile with the same jobs and files (medians of ``--repeat``, the three no-ops taking turns). Two bare
  Snakefiles are measured: a flat one, as many independent jobs writing as many files
  (benchmarks/pipeline_speed.py's), and one with the pipeline's own DAG, written from the dry run (each rule's
  outputs, inputs, logs and benchmark files as patterns of its wildcards; no params, no input functions, no
  planning), which Snakemake plans with the same edges as ours. The second is what the pipeline adds to
  Snakemake; the first is also what the DAG's shape costs Snakemake.

Nothing runs NVIDIA's code but its config files, sourced by the capture jobs (the folders' run_and_time.sh never
starts).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.pipeline_speed import bare_snakefile  # noqa: E402
from mlrepro.runs.capture import CaptureError, source_native  # noqa: E402
from mlrepro.runs.implementation import RUN_SCRIPT  # noqa: E402

TARBALL = REPO.parent / "shared" / "data" / "mlperf_training_nvidia_implementations_v1.1.tar.xz"
SYSTEMS = 10
PLAN_TARGET_S = 10.0
NOOP_TARGET_RATIO = 1.3


def shapes(benchmarks: Path) -> dict[str, tuple[Path, list[tuple[int, str]]]]:
    """benchmark -> (its implementation folder, [(nodes, config file)] sorted by nodes): the files that say
    their node count (DGXNNODES); the shared *_common.sh and the unit-test one are left out."""
    found = {}
    for bm in sorted(p for p in benchmarks.iterdir() if p.is_dir()):
        folder = next(p for p in sorted((bm / "implementations").iterdir()) if (p / RUN_SCRIPT).is_file())
        files = []
        for config in sorted(folder.glob("config_*.sh")):
            try:
                env = source_native(config).env
            except CaptureError:
                continue
            if env.get("DGXNNODES", "").isdigit() and "unittest" not in config.name:
                files.append((int(env["DGXNNODES"]), config.name))
        found[bm.name] = (folder, sorted(files))
    return found


def submission_config(root: Path, found: dict[str, tuple[Path, list[tuple[int, str]]]]) -> dict[str, Any]:
    data = root / "data"
    benchmarks = {}
    for bm, (folder, _) in found.items():
        (data / bm).mkdir(parents=True, exist_ok=True)
        benchmarks[bm] = {"implementation": str(folder), "data_dir": str(data / bm)}
    systems = {f"dgxa100_set{k}": {"config_files": {bm: files[k % len(files)][1] for bm, (_, files) in found.items()}}
               for k in range(SYSTEMS)}
    return {"ruleset": "1.1.0", "division": "closed", "org": "NVIDIA", "engine": "native", "gpus": 0,
            "inference": {"benchmarks": []}, "benchmarks": benchmarks, "systems": systems}


def timed(argv: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall and CPU seconds (user + system, the command's processes) of one command: on a shared machine the
    CPU figure is what the command costs, the wall figure what its user waits."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, proc


def snakemake(workdir: Path, config: Path, *args: str) -> tuple[float, float, str]:
    wall, cpu, proc = timed([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                             "--directory", str(workdir), "--configfile", str(config), "--cores", "1", *args])
    if proc.returncode != 0:
        sys.exit(f"snakemake {' '.join(args)} failed in {workdir}:\n{proc.stderr[-4000:]}")
    return wall, cpu, proc.stdout + proc.stderr


def outputs_of(dry_run: str) -> list[str]:
    """Every job's output files, as the dry run lists them."""
    files = []
    for line in dry_run.splitlines():
        if line.startswith("    output: "):
            files += [f.strip() for f in line.removeprefix("    output: ").split(",")]
    return files


def bare_command(snakefile: Path, folder: Path) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(folder),
            "--cores", "1"]


def dry_jobs(dry_run: str) -> list[dict[str, str]]:
    """Each job the dry run lists: its rule and its input, output, log, benchmark and wildcards lines."""
    jobs: list[dict[str, str]] = []
    job: dict[str, str] | None = None
    for line in dry_run.splitlines():
        if m := re.fullmatch(r"(?:local)?(?:rule|checkpoint) (\w+):", line):
            job = {"rule": m[1]}
            jobs.append(job)
        elif job is not None and (m := re.fullmatch(r"    (input|output|log|benchmark|wildcards): (.*)", line)):
            job[m[1]] = m[2]
        elif not line.startswith("    "):
            job = None
    return jobs


def _pattern(path: str, wildcards: dict[str, str]) -> str:
    # a wildcard's value where it stands between delimiters (".../rnnt/8/..." or "run_set3_rnnt_8.log"),
    # the longest first: "8" inside "dgxa100_set8" is not a run index
    for name, value in sorted(wildcards.items(), key=lambda kv: -len(kv[1])):
        path = re.sub(rf"(?<=[/_]){re.escape(value)}(?=[/_.]|$)", "{" + name + "}", path)
    return path


def same_dag_snakefile(folder: Path, dry_run: str, done: Path) -> Path:
    """A bare Snakefile with the pipeline's DAG: one rule per rule of ours, its files as our jobs name them
    (patterns of the wildcards where it has any), nothing else. Inputs that are no pattern of a job's wildcards (a
    run's config file's capture record, named by its content) are looked up in a table of the jobs' own inputs; every
    job of a rule must give the same patterns of its other files, or this script stops: the bare DAG would not be
    ours."""
    rules: dict[str, list[tuple[dict[str, str], dict[str, str]]]] = {}
    for job in dry_jobs(dry_run):
        wildcards = dict(item.split("=", 1) for item in job["wildcards"].split(", ")) if "wildcards" in job else {}
        rules.setdefault(job["rule"], []).append((wildcards, job))
    lines = []
    for name in sorted(rules, key=lambda r: r != "all"):  # the first rule is the default target
        lines.append(f"rule {name}:")
        for key in ("input", "output", "log", "benchmark"):
            found = [(w, job[key].split(", ")) for w, job in rules[name] if key in job]
            if not found:
                continue
            patterns = {tuple(_pattern(f, w) for f in files) for w, files in found}
            if len(patterns) == 1:
                items = [f"directory({f!r})" if key == "output" and (done / f).is_dir() else repr(f)
                         for f in patterns.pop()]
                lines.append(f"    {key}: {', '.join(items)}")
            elif key == "input":
                names = sorted(found[0][0])
                table = {tuple(w[n] for n in names): files for w, files in found}
                lines.append(f"    input: lambda w, table={table!r}: table[({''.join(f'w.{n}, ' for n in names)})]")
            else:
                sys.exit(f"rule {name}: its jobs' {key} files are not patterns of their wildcards; no bare DAG")
        if name != "all":
            lines.append("    shell: 'exit 1'  # never runs: this Snakefile is only planned")
        lines.append("")
    snakefile = folder / "Snakefile"
    snakefile.write_text("\n".join(lines))
    return snakefile


def write_outputs(workdir: Path, files: list[str]) -> None:
    """Each output as the pipeline's planning checks read it (mlrepro/planning/prepare.py): a result beside the
    run.json that records its sha256, JSON elsewhere, a folder for the package; the capture records are their jobs'."""
    for name in files:
        path = workdir / name
        if "/pipeline_info/captures/" in name:
            continue
        if name.endswith("/submission") or name == "results/submission":
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name == "result.txt":
            path.write_text(":::MLLOG {}\n")
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            path.with_name("run.json").write_text(json.dumps({"result_sha256": digest}))
        elif path.name != "run.json":
            path.write_text("{}\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tarball", type=Path, default=TARBALL)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", type=Path, help="keep the folders here (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=Path("planning_scale.json"))
    args = p.parse_args()
    base = args.workdir or Path(tempfile.mkdtemp(prefix="mlrepro-planning-"))
    shutil.rmtree(base / "nvidia", ignore_errors=True)
    with tarfile.open(args.tarball) as tar:
        tar.extractall(base / "nvidia", filter="data")
    found = shapes(base / "nvidia" / "NVIDIA" / "benchmarks")
    config = base / "submission.yaml"
    config.write_text(yaml.safe_dump(submission_config(base, found)))

    plan_s, plan_cpu, dry = [], [], ""
    for i in range(args.repeat):
        empty = base / f"plan{i}"
        shutil.rmtree(empty, ignore_errors=True)
        empty.mkdir()
        wall, cpu, dry = snakemake(empty, config, "-n")
        plan_s.append(wall)
        plan_cpu.append(cpu)
    jobs = int(next(line.split()[1] for line in dry.splitlines() if line.startswith("total")))

    done = base / "done"
    shutil.rmtree(done, ignore_errors=True)
    done.mkdir()
    capture_s, capture_cpu, _ = snakemake(done, config, "--until", "capture")  # the config files, sourced by their jobs
    write_outputs(done, outputs_of(dry))
    snakemake(done, config, "--touch")
    files = sum(1 for f in done.rglob("*") if f.is_file() and ".snakemake" not in f.relative_to(done).parts)

    flat = base / "bare"
    shutil.rmtree(flat, ignore_errors=True)
    flat.mkdir()
    flat_cmd = bare_command(bare_snakefile(flat, jobs, files), flat)
    # its files as ours: written here, then recorded by --touch (its jobs would only write them)
    for i in range(jobs):
        (flat / "out" / str(i)).mkdir(parents=True)
        for k in range(max(1, -(-files // jobs))):
            (flat / "out" / str(i) / f"{k}.txt").write_text("x\n")
    subprocess.run([*flat_cmd, "--touch"], check=True, capture_output=True)

    same = base / "same_dag"
    shutil.rmtree(same, ignore_errors=True)
    shutil.copytree(done, same, ignore=shutil.ignore_patterns(".snakemake"))
    same_cmd = bare_command(same_dag_snakefile(same, dry, done), same)
    subprocess.run([*same_cmd, "--touch"], check=True, capture_output=True)
    same_dry = subprocess.run([*same_cmd, "-n", "--forceall"], check=True, capture_output=True, text=True).stdout
    same_jobs = int(next(line.split()[1] for line in same_dry.splitlines() if line.startswith("total")))
    if same_jobs != jobs:
        sys.exit(f"the bare Snakefile with the pipeline's DAG plans {same_jobs} jobs, the pipeline {jobs}")

    noop_s, noop_cpu, bare_s, bare_cpu, same_s, same_cpu = [], [], [], [], [], []
    for _ in range(args.repeat):  # the three no-ops take turns: each round shares the machine's state
        wall, cpu, text = snakemake(done, config)
        if "Nothing to be done" not in text:
            sys.exit(f"the no-op in {done} planned jobs:\n{text[-3000:]}")
        noop_s.append(wall)
        noop_cpu.append(cpu)
        for cmd, walls, cpus in ((flat_cmd, bare_s, bare_cpu), (same_cmd, same_s, same_cpu)):
            wall, cpu, proc = timed(cmd)
            if proc.returncode != 0 or "Nothing to be done" not in proc.stdout + proc.stderr:
                sys.exit(f"a bare Snakefile's no-op failed or planned jobs ({cmd}):\n{proc.stderr[-3000:]}")
            walls.append(wall)
            cpus.append(cpu)

    units = {f"dgxa100_set{k}": {bm: {"config_file": files_[k % len(files_)][1], "nodes": files_[k % len(files_)][0]}
                                 for bm, (_, files_) in found.items()} for k in range(SYSTEMS)}
    summary = {
        "systems": SYSTEMS, "benchmarks": len(found), "jobs": jobs, "files": files, "repeat": args.repeat,
        "plan_s": plan_s, "plan_s_median": statistics.median(plan_s), "plan_target_s": PLAN_TARGET_S,
        "capture_run_s": capture_s, "capture_run_cpu_s": capture_cpu,
        "plan_cpu_s": plan_cpu, "plan_cpu_s_median": statistics.median(plan_cpu),
        "noop_s": noop_s, "noop_s_median": statistics.median(noop_s),
        "noop_cpu_s": noop_cpu, "noop_cpu_s_median": statistics.median(noop_cpu),
        "bare_noop_s": bare_s, "bare_noop_s_median": statistics.median(bare_s),
        "bare_noop_cpu_s": bare_cpu, "bare_noop_cpu_s_median": statistics.median(bare_cpu),
        "noop_ratio_to_bare": statistics.median(noop_s) / statistics.median(bare_s),
        "noop_cpu_ratio_to_bare": statistics.median(noop_cpu) / statistics.median(bare_cpu),
        "same_dag_noop_s": same_s, "same_dag_noop_s_median": statistics.median(same_s),
        "same_dag_noop_cpu_s": same_cpu, "same_dag_noop_cpu_s_median": statistics.median(same_cpu),
        "noop_ratio_to_same_dag": statistics.median(noop_s) / statistics.median(same_s),
        "noop_cpu_ratio_to_same_dag": statistics.median(noop_cpu) / statistics.median(same_cpu),
        "noop_target_ratio": NOOP_TARGET_RATIO, "load_1min": os.getloadavg()[0], "cores": os.cpu_count(),
        "units": units,
    }
    args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{SYSTEMS} systems x {len(found)} benchmarks: {jobs} jobs, {files} files; "
          f"plan (snakemake -n) median {summary['plan_s_median']:.2f} s wall, {summary['plan_cpu_s_median']:.2f} s "
          f"CPU (target <= {PLAN_TARGET_S:.0f} s); the capture jobs (--until capture) {capture_s:.2f} s wall, "
          f"{capture_cpu:.2f} s CPU; no-op median {summary['noop_s_median']:.2f} s wall, "
          f"{summary['noop_cpu_s_median']:.2f} s CPU; a bare Snakefile with the pipeline's DAG "
          f"{summary['same_dag_noop_s_median']:.2f} s, {summary['same_dag_noop_cpu_s_median']:.2f} s: "
          f"{summary['noop_ratio_to_same_dag']:.2f}x wall, {summary['noop_cpu_ratio_to_same_dag']:.2f}x CPU "
          f"(target <= {NOOP_TARGET_RATIO}x); a flat bare Snakefile {summary['bare_noop_s_median']:.2f} s, "
          f"{summary['bare_noop_cpu_s_median']:.2f} s: {summary['noop_ratio_to_bare']:.2f}x wall, "
          f"{summary['noop_cpu_ratio_to_bare']:.2f}x CPU; load {summary['load_1min']:.2f} on {summary['cores']} cores")
    # the target is the pipeline's own cost: against the same DAG without the pipeline
    ok = summary["plan_s_median"] <= PLAN_TARGET_S and summary["noop_ratio_to_same_dag"] <= NOOP_TARGET_RATIO
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
