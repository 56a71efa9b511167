"""The rule<->code seam (mlrepro/jobs.py, rules/dispatch.py): every rule's job as Snakemake's script: directive runs
it, its log one way, its failure on the terminal, the one table of entry functions."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from mlrepro import jobs
from mlrepro.core.hashing import sha256_file
from mlrepro.core.job import Job, call
from mlrepro.runs import warm
from tests.conftest import REPO, dispatch, make_job, write_mllog


def _result(tmp_path: Path, drop: str = "") -> tuple[Path, Path]:
    """A run's result (without the ``drop`` event: not compliant) and its record of the result's hash."""
    result = write_mllog(tmp_path / "run" / "result.txt", "resnet", 1_700_000_000_000, 2.0)
    if drop:
        result.write_text("".join(line for line in result.read_text().splitlines(keepends=True)
                                  if f'"key": "{drop}"' not in line))
    summary = result.with_name("run.json")
    summary.write_text(json.dumps({"result_sha256": sha256_file(result)}))
    return result, summary


def _compliance(tmp_path: Path, result: Path, summary: Path) -> Job:
    return make_job("compliance", input={"result": result, "summary": summary},
                    output={"verdict": tmp_path / "verdict.json"},
                    params={"usage": "training", "ruleset": "2.0.0", "release": None},
                    wildcards={"system": "s", "benchmark": "resnet", "run": "0"}, log=tmp_path / "logs" / "c.log")


def test_a_job_runs_through_the_dispatcher_with_its_output_in_its_log(tmp_path: Path) -> None:
    job = _compliance(tmp_path, *_result(tmp_path))
    (tmp_path / "logs").mkdir()
    Path(str(job.log)).write_text("a previous attempt's log\n")
    proc = dispatch(tmp_path, job)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "verdict.json").read_text())["valid"] is True
    assert proc.stdout == proc.stderr == ""  # nothing on the terminal: a job's output is its log
    assert "a previous attempt" not in Path(str(job.log)).read_text()  # each attempt's log starts empty


def test_a_failed_job_leaves_its_error_in_its_log_and_the_logs_end_on_the_terminal(tmp_path: Path) -> None:
    job = _compliance(tmp_path, *_result(tmp_path, drop="run_start"))
    (tmp_path / "logs").mkdir()
    proc = dispatch(tmp_path, job)
    log = Path(str(job.log)).read_text()
    assert proc.returncode == 1 and "fails the MLPerf compliance checker" in log
    assert log in proc.stderr and not (tmp_path / "verdict.json").exists()
    # what is not the project's own error (a bug: here a rule without a param its job reads) leaves its traceback
    broken = make_job("compliance", input={"result": tmp_path / "missing.txt"}, output={"verdict": tmp_path / "v"},
                      params={"usage": "training"}, log=tmp_path / "logs" / "b.log")
    proc = dispatch(tmp_path, broken)
    assert proc.returncode == 1 and "Traceback" in Path(str(broken.log)).read_text() and "Traceback" in proc.stderr


def test_a_shown_jobs_log_goes_to_the_terminal(tmp_path: Path) -> None:
    job = make_job("verify_data", params={"receipts": []}, log=tmp_path / "verify.log")
    proc = dispatch(tmp_path, job)
    assert proc.returncode == 0, proc.stderr
    assert "every file matches its manifest" in proc.stdout and "every file matches" in Path(str(job.log)).read_text()


def test_the_job_has_neither_the_working_folder_nor_the_scripts_folder_on_its_path(tmp_path: Path) -> None:
    """Snakemake runs ``python SCRIPT`` (the script's folder first on the path) and extends the path with its main
    process's, which holds the working folder where Snakemake was started there as ``python -m snakemake``: a
    folder there named like a module must not be imported by the job (Python's -P for the script)."""
    probe = tmp_path / ".snakemake" / "scripts" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(f"import sys, json\nsys.path.extend([{str(tmp_path)!r}, {str(REPO)!r}])\n"
                     "from mlrepro import jobs\njobs._isolate_path()\nprint(json.dumps(sys.path))\n")
    out = subprocess.run([sys.executable, str(probe)], cwd=tmp_path, capture_output=True, text=True, check=True)
    path = json.loads(out.stdout)
    assert str(tmp_path) not in path and str(probe.parent) not in path and str(REPO) in path


def test_a_process_a_job_spawns_does_not_run_the_job_again() -> None:
    """multiprocessing's spawn (a process pool's, as the LibriSpeech preparation's) runs the main module's file,
    which Snakemake's preamble names as the dispatcher itself, as __mp_main__: without ``snakemake`` defined."""
    runpy.run_path(str(REPO / "rules" / "dispatch.py"), run_name="__mp_main__")


def test_every_rule_that_runs_a_script_runs_the_dispatcher_and_has_an_entry() -> None:
    names = set()
    for rules in sorted((REPO / "rules").glob("*.smk")):
        text = rules.read_text()
        for block in re.split(r"\n(?=\s*rule\b)", text):
            if "script:" not in block:
                continue
            assert re.search(r'script:\s*\n\s*"dispatch.py"', block), (rules.name, block[:200])
            if m := re.match(r"\s*rule (\w+):", block):
                names.add(m.group(1))
            else:  # rules made in a loop name themselves: rules/data.smk's recipe steps
                names |= {f"data_{s}" for s in ("download", "verify", "extract", "prepare")}
    assert names - set(jobs.ENTRIES) == set()


@pytest.mark.parametrize("rule", sorted(jobs.ENTRIES))
def test_each_entry_is_a_function_of_one_job(rule: str) -> None:
    module, _, function = jobs.ENTRIES[rule].partition(":")
    entry = getattr(importlib.import_module(module), function)
    assert list(inspect.signature(entry).parameters) == ["job"]


def test_warm_jobs_name_warm_parents() -> None:
    assert set(jobs.WARM.values()) <= {warm.DATA, warm.INFERENCE}
    assert "run" not in jobs.WARM  # the driver runs in its job's process: no parent, no socket hop (issue 46)
    for rule, module in jobs.WARM.items():
        assert jobs.ENTRIES[rule].partition(":")[0] == module  # the parent imports what its children run


def test_a_job_round_trips_as_json_and_its_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    job = _compliance(tmp_path, *_result(tmp_path))
    assert Job.from_json(job.to_json()) == job
    assert job.input["result"].name == "result.txt" and job.input.many("result") == [job.input["result"]]
    assert job.input.get("image") is None
    bad = make_job("score", output={"scores": tmp_path / "s.json"},
                   params={"runs": {"s": {"resnet": [str(tmp_path / "gone" / "result.txt")]}}, "keep": {},
                           "ruleset": None, "division": "open"})
    assert call(jobs.ENTRIES["score"], bad) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: finished results do not match") and "Traceback" not in err
