"""The processes one run crosses, and what each hop costs before the next one starts (issue 46, item 3).

    .venv/bin/python benchmarks/run_hops.py [--repeats 3] [--cold]

One mini-ResNet run (config/test.yaml, one run, no inference), its dataset, capture and launch made first; then,
``--repeats`` times, its run folder removed and the run made again by ``snakemake <its run.json>`` alone, while this
script (a child subreaper: the warm parents, which detach, stay its descendants) samples /proc every 5 ms. Per
repeat: every process started under Snakemake (a process living under 5 ms can be missed: the count is a lower
bound), by role (a forked child keeps its parent's command line), each with its start after Snakemake's (the
kernel's start times, 10 ms ticks) and its life; the training's life, and the wall of the invocation; and what a
cold hop's imports cost (a fresh interpreter importing them). ``--cold``: warm_start off (every hop a fresh
interpreter), to compare. Prints one JSON document; the medians are over the repeats.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, start time in seconds since boot) of ``pid``; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[19]) / TICK


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def _watch(argv: list[str], cwd: Path) -> tuple[dict[int, dict], float, int, int]:
    """Run ``argv``, sampling its descendants: pid -> parent, start, end (seconds since boot), command line."""
    seen: dict[int, dict] = {}
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    me, ended = os.getpid(), 0.0
    while True:
        now = _uptime()
        alive = set()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            info = seen.get(pid) or _stat(pid)
            if info is None:
                continue
            if pid not in seen:
                parent, start = info  # type: ignore[misc]
                chain, ancestor = [], parent
                while ancestor not in (0, 1, me) and ancestor not in seen:
                    up = _stat(ancestor)
                    if up is None:
                        break
                    chain.append(ancestor)
                    ancestor = up[0]
                if ancestor != me and ancestor not in seen:
                    continue  # not ours
                seen[pid] = {"parent": parent, "start": start, "cmd": _cmdline(pid)}
            alive.add(pid)
            seen[pid]["end"] = now
        if proc.poll() is not None:
            ended = ended or time.monotonic()
            if not (alive - {proc.pid}) or time.monotonic() - ended > 10:  # the warm parents end with Snakemake
                break
        time.sleep(0.005)
        while True:  # reap what was reparented to us (the subreaper)
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
    proc.wait()
    wall = (ended or time.monotonic()) - started
    return seen, wall, proc.returncode, proc.pid


def _role(pid: int, seen: dict[int, dict]) -> str:
    """What the process is, from its command line (a forked child keeps its parent's: said so)."""
    cmd, parent = seen[pid]["cmd"], seen.get(seen[pid]["parent"])
    if parent is not None and parent["cmd"] == cmd:
        return f"forked child of {_role(seen[pid]['parent'], seen)}"
    if "mlrepro.runs.warm" in cmd:
        module = cmd.split("--module", 1)[1].split()[0] if "--module" in cmd else "?"
        return f"warm parent of {module}"
    for needle, role in (("-m snakemake", "snakemake"), ("dispatch.py", "the job (rules/dispatch.py)"),
                         ("mlrepro.runs.driver", "run driver (cold)"), ("run_and_time.sh", "run_and_time.sh (bash)"),
                         ("-m mlrepro.train", "training, or the warm shim that hands it over"),
                         ("mlrepro.telemetry", "telemetry sampler")):
        if needle in cmd:
            return role
    return cmd[:100] or "?"


def _timeline(seen: dict[int, dict], root: int) -> list[dict]:
    """Every process this Snakemake started, by its start, in seconds after Snakemake's: what it is, how long it
    lived (a warm parent of the previous invocation may still be ending: started before, it is left out)."""
    zero = seen[root]["start"]
    return [{"start_s": round(s["start"] - zero, 2), "life_s": round(s["end"] - s["start"], 2),
             "role": _role(p, seen)} for p, s in sorted(seen.items(), key=lambda x: x[1]["start"])
            if s["start"] >= zero]


# What a cold hop pays before its own work: a fresh interpreter importing what that hop imports.
IMPORTS = {"interpreter alone": "pass", "a job (mlrepro.jobs)": "import mlrepro.jobs",
           "the run driver": "import mlrepro.runs.driver",
           "the telemetry store": "import mlrepro.telemetry.store",
           "the telemetry summary": "import mlrepro.telemetry.summary",
           "the run job, all it imports (jobs, driver, sampler, summary)":
               "import mlrepro.jobs, mlrepro.runs.driver, mlrepro.telemetry, mlrepro.telemetry.sampler",
           "the training (torch, the loop)": "import mlrepro.training.loop"}


def _import_costs(repeats: int) -> dict[str, float]:
    """Median wall of ``python -P -c CODE`` from the repository, per hop's imports."""
    out = {}
    for name, code in IMPORTS.items():
        walls = []
        for _ in range(repeats):
            t = time.monotonic()
            subprocess.run([sys.executable, "-P", "-c", code], cwd=REPO, check=True)
            walls.append(time.monotonic() - t)
        out[name] = round(statistics.median(walls), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="warm_start off")
    args = ap.parse_args()
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    work = Path(tempfile.mkdtemp(prefix="mlrepro-hops-"))
    try:
        config = work / "one_run.yaml"
        config.write_text(json.dumps({"only": ["resnet"], "allow_fewer_runs": True, "warm_start": not args.cold,
                                      "inference": {"benchmarks": []}, "benchmarks": {"resnet": {"runs": 1}}}))
        system = os.environ.get("MLREPRO_AUTO_SYSTEM") or subprocess.run(
            [sys.executable, "-c", "from mlrepro.config import host_system_name; print(host_system_name())"],
            cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        target = f"results/runs/{system}/resnet/0/run.json"
        argv = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
                "--cores", "2", "--configfile", str(REPO / "config" / "test.yaml"), str(config), "--", target]
        subprocess.run(argv, cwd=REPO, check=True, capture_output=True)  # the run's dataset, capture and launch
        repeats = []
        for _ in range(args.repeats):
            shutil.rmtree(work / "results" / "runs" / system / "resnet" / "0")
            seen, wall, status, root = _watch(argv, REPO)
            if status != 0:
                raise SystemExit(f"snakemake exited {status}")
            timeline = _timeline(seen, root)
            roles = [t["role"] for t in timeline]
            # warm: the training is the train parent's forked child (the shim waits for it); cold: the interpreter
            # that run_and_time.sh's exec started
            trained = [t["life_s"] for t in timeline if t["role"] == "forked child of warm parent of mlrepro.train"] \
                or [t["life_s"] for t in timeline if t["role"] == "training, or the warm shim that hands it over"]
            repeats.append({"processes_at_least": len(timeline),
                            "by_role": {r: roles.count(r) for r in sorted(set(roles))},
                            "training_s": max(trained, default=None), "wall_s": round(wall, 2),
                            "timeline": timeline})
        walls = [r["wall_s"] for r in repeats]
        trainings = [r["training_s"] for r in repeats if r["training_s"] is not None]
        print(json.dumps({
            "warm_start": not args.cold, "load_1min": os.getloadavg()[0],
            "median_processes_at_least": statistics.median(r["processes_at_least"] for r in repeats),
            "median_wall_s": statistics.median(walls),
            "median_training_s": statistics.median(trainings) if trainings else None,
            "median_outside_training_s": round(statistics.median(w - t for w, t in zip(walls, trainings, strict=False)),
                                               2) if trainings else None,
            "cold_import_s": _import_costs(args.repeats),
            "repeats": repeats}, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
