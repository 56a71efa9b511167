"""The submitter's gate judges as the unpatched official compliance checker does, on the public Training
v1.1 round: every result file (``pytest -m round``) and CI's sample of organisations (integration tier).

Both sides run in spawned processes, so that nothing of another test (the audit's fast paths, which
its workers install) can reach them: the official side as ``python -m mlperf_logging.compliance_checker``
calls it (``mlp_compliance.main``), the gate as the pipeline calls it (``compliance.check``).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlrepro.audit import discover
from tests import rounds

RULESET = "1.1.0"
# (valid, errors: not overwritable then overwritable, warnings as "key: message", the exception it dies of)
Outcome = tuple[bool, list[str], list[str], str]


def _official(path: str) -> Outcome:
    from mlperf_logging.compliance_checker import mlp_compliance

    from mlrepro.gate.compliance import _cut

    logging.disable(logging.CRITICAL)
    mlp_compliance.enqueued_configs.clear()  # a fresh process per file, as the CLI has
    checker = mlp_compliance.make_checker("training", RULESET, False, False)
    crash = ""
    try:
        valid = bool(mlp_compliance.main(path, f"training_{RULESET}/common.yaml", checker)[0])
    except Exception as e:
        valid, crash = False, type(e).__name__
    errors = [_cut(str(m)) for m in [*checker.not_overwritable, *checker.overwritable.values()]]
    return valid, errors, [_cut(f"{k}: {m}") for k, m in checker.warnings.items()], crash


def _gate(path: str) -> Outcome:
    from mlrepro.audit import fastpath
    from mlrepro.gate import compliance

    verdict = compliance.check(Path(path), "training", RULESET)
    assert not fastpath._FAST  # the gate's process never has the audit's fast paths
    prefix = "the official checker crashes on this file: "
    if verdict.messages and verdict.messages[0].startswith(prefix):
        return verdict.valid, [], [], verdict.messages[0].removeprefix(prefix).split(":")[0]
    return verdict.valid, verdict.messages, verdict.warnings, ""


def _compare(root: Path) -> tuple[int, int]:
    """Every result file under ``root``, judged by both; (files, of them valid)."""
    files = discover.result_files(discover.find_orgs(root))
    jobs = os.cpu_count() or 2
    with cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        official = list(pool.map(_official, files, chunksize=8))
        gate = list(pool.map(_gate, files, chunksize=8))
    mismatched = [(f, o, g) for f, o, g in zip(files, official, gate, strict=True) if o != g]
    assert not mismatched, mismatched[:3]
    return len(files), sum(o[0] for o in official)


@pytest.mark.integration
def test_the_gate_judges_a_sample_of_the_round_as_the_official_checker(v11_round: Path, tmp_path: Path) -> None:
    files, valid = _compare(rounds.copy_orgs(v11_round, tmp_path, rounds.SAMPLE))
    assert files == 175 and 0 < valid < files  # both verdicts occur


@pytest.mark.round
def test_the_gate_judges_the_whole_round_as_the_official_checker(v11_round: Path) -> None:
    files, valid = _compare(v11_round)  # neither side writes into it
    assert files > 1500 and 0 < valid < files


def test_the_gate_imports_nothing_of_the_audit() -> None:
    code = ("import sys, mlrepro.gate.compliance; "
            "print(sorted(m for m in sys.modules if m.startswith('mlrepro.audit')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
