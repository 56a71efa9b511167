"""Slurm's own record of a job: its id, node list and state, from ``sacct`` (accounting) or ``scontrol``.

The pipeline reports what Slurm says about each run (COMPLETED, CANCELLED, TIMEOUT, NODE_FAIL,
PREEMPTED, OUT_OF_MEMORY, FAILED), never its own guess.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlrepro.core.outputs import Outputs

SLURM_RECORD = "slurm_job.json"  # in a run's folder: the Slurm job of its latest attempt


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # Slurm's state word, e.g. COMPLETED, CANCELLED, TIMEOUT
    node_list: str
    elapsed: str = ""
    exit_code: str = ""


def this_job(env: Mapping[str, str]) -> dict[str, str] | None:
    """The Slurm job a run step is part of (None outside Slurm); its node list comes from the controller
    because the executor's job step drops SLURM_JOB_NODELIST from the environment."""
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return None
    nodes = env.get("SLURM_JOB_NODELIST") or _scontrol_nodes(job_id) or socket.gethostname()
    return {"job_id": job_id, "node_list": nodes}


def _scontrol_nodes(job_id: str) -> str | None:
    if not shutil.which("scontrol"):
        return None
    proc = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30,
                          check=False)
    for field in proc.stdout.split():
        if field.startswith("NodeList="):
            return field.split("=", 1)[1]
    return None


def parse_sacct(text: str) -> dict[str, JobState]:
    """``sacct -X -P -n -o JobIDRaw,State,NodeList,Elapsed,ExitCode`` output, one job a line."""
    states = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 5 or not parts[0]:
            continue
        # "CANCELLED by 0" -> CANCELLED: the word is the state, the rest who did it
        states[parts[0]] = JobState(parts[0], parts[1].split()[0] if parts[1] else "UNKNOWN", parts[2], parts[3],
                                    parts[4])
    return states


def sacct_states(job_ids: Iterable[str]) -> dict[str, JobState]:
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    proc = subprocess.run(["sacct", "-X", "-P", "-n", "-o", "JobIDRaw,State,NodeList,Elapsed,ExitCode",
                           "-j", ",".join(ids)], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"sacct failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    return parse_sacct(proc.stdout)


def as_dict(state: JobState) -> dict[str, str]:
    return asdict(state)


def slurm_states(jobs: Iterable[dict[str, Any]]) -> None:
    """Add Slurm's state (and its node list) to each run's ``{"job_id", "node_list"}``, in place."""
    jobs = list(jobs)
    try:
        states = sacct_states(j["job_id"] for j in jobs)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        states, reason = {}, f"unknown (sacct: {str(e)[:200]})"
    else:
        reason = "unknown (not in sacct)"
    for j in jobs:
        found = states.get(j["job_id"])
        j["state"] = found.state if found else reason
        if found and found.node_list not in ("", "None assigned"):
            j["node_list"] = found.node_list
        j["node_list"] = j.get("node_list") or "no node"


# the plugin's job comment of a run: its wildcards system (may hold "_"), benchmark, run
RUN_COMMENT = re.compile(r"^rule_run_wildcards_(.+)_([A-Za-z0-9]+)_(\d+)$")


def submitted_runs(workdir: Path) -> dict[tuple[str, str, str], str]:
    """Slurm's own list of the run jobs submitted from ``workdir``: (system, benchmark, run) -> the latest job id.

    The executor plugin names each job's rule and wildcards in its comment; sacct has it where the cluster
    stores comments (AccountingStoreFlags=job_comment). This finds a run that was cancelled before its
    driver could record anything."""
    proc = subprocess.run(["sacct", "-X", "-P", "-n", "-S", "now-7days", "-o", "JobIDRaw,Comment,WorkDir"],
                          capture_output=True, text=True, timeout=60, check=False)
    latest: dict[tuple[str, str, str], str] = {}
    for line in proc.stdout.splitlines():
        job_id, comment, where = [*line.split("|"), "", ""][:3]
        m = RUN_COMMENT.match(comment)
        if m and where == str(workdir.resolve()) and job_id.isdigit():
            key = (m.group(1), m.group(2), m.group(3))
            if int(job_id) > int(latest.get(key, "0")):
                latest[key] = job_id
    return latest


def run_states(outdir: Path, workdir: Path | None = None) -> list[dict[str, Any]]:
    """Every run's latest Slurm job with Slurm's state for it, and whether the run finished: from the runs'
    own records (slurm_job.json) and from sacct's job comments, the later job where both know one."""
    runs: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in sorted((outdir / "runs").glob(f"*/*/*/{SLURM_RECORD}")):  # runs/<system>/<benchmark>/<i>/
        runs[(record.parent.parent.parent.name, record.parent.parent.name, record.parent.name)] = \
            json.loads(record.read_text())
    try:
        for key, job_id in submitted_runs(workdir or Path.cwd()).items():
            if key not in runs or int(job_id) > int(runs[key]["job_id"]):
                runs[key] = {"job_id": job_id, "node_list": ""}
    except (OSError, subprocess.TimeoutExpired):
        pass  # no sacct: the runs' own records
    records = [{"system": s, "benchmark": b, "run": i, **job, "finished": Outputs(outdir).summary(s, b, i).is_file()}
               for (s, b, i), job in sorted(runs.items())]
    slurm_states(records)
    return records


def describe(records: Iterable[Mapping[str, Any]]) -> str:
    return "\n".join(f"  {r['system']}/{r['benchmark']} run {r['run']}: Slurm job {r['job_id']} on {r['node_list']}: "
                     f"{r['state']}{'' if r['finished'] else ' (no result; the next invocation runs it again)'}"
                     for r in records)


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m mlrepro.slurm.jobs",
                                description="Each run's Slurm job, node list and state (sacct).")
    p.add_argument("outdir", type=Path, nargs="?", default=Path("results"))
    args = p.parse_args(argv)
    print(describe(run_states(args.outdir)) or "no run has run on Slurm")


if __name__ == "__main__":
    main()
