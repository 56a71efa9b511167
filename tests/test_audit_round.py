"""The public Training v1.1 round: verdicts and scores against the official tools, on CI's sample of
organisations (integration tier) and on the whole round (``pytest -m round``; tests/rounds.py).

Reads ``../shared/data/mlperf_training_results_v1.1.tar.xz`` beside the repository; skipped when
absent (a failure under CI). The official result_summarizer runs twice per organisation on a fresh copy (two
organisations at a time): it scores a folder before its own RCP check writes ``scaling.json``, so
its first run prints raw scores and its second, reading what the first wrote, the published
(scaled) ones. A spy on its calls of ``mlp_compliance.main`` records the official verdict and
messages of every file the first run checks (with the CLI's default ``quiet=False``, which changes
no verdict). The files do not change between the runs (only ``scaling.json`` is written), so the
second run's ``_read_result_file`` answers with the first run's result instead of checking and
parsing every file again; its RCP checks and scoring run as they are. The files the summarizer
never reaches go through the official checker directly.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import io
import logging
import math
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from mlrepro.audit import discover, pipeline
from mlrepro.audit.check import check_round
from tests import rounds

RULESET = "1.1.0"


Verdict = tuple[bool, list[str], str]


Rows = dict[str, dict[str, Any]]
# CI's sample (tests/rounds.py) as the official tools judge it: (files, published scores, of them scaled)
SAMPLE_FIGURES = (175, 11, 3)


def _official_org(folder: str) -> tuple[dict[str, Verdict], Rows, Rows, str]:
    """result_summarizer twice on one organisation: (verdicts, raw and published rows by details_url, crash)."""
    from mlperf_logging.compliance_checker import mlp_compliance
    from mlperf_logging.result_summarizer import result_summarizer

    logging.disable(logging.CRITICAL)
    verdicts: dict[str, Verdict] = {}
    official_main = mlp_compliance.main
    official_read = result_summarizer._read_result_file
    # per file: the first run's answer of _read_result_file (its run_start/run_stop lines, in order,
    # all that _query_run_start_stop reads) or the ValueError it raised
    read: dict[str, Any] = {}

    def spy(filename: str, config_file: str, checker: Any) -> Any:
        checker.quiet = False
        try:
            result = official_main(filename, config_file, checker)
        except Exception as e:
            verdicts[filename] = (False, _messages(checker), type(e).__name__)
            raise
        verdicts[filename] = (bool(result[0]), _messages(checker), "")
        return result

    def memo(result_file: str, usage: str, ruleset: str) -> Any:
        if result_file not in read:  # the first run: the official function, which calls main (spied)
            try:
                loglines = official_read(result_file, usage, ruleset)
            except ValueError as e:
                read[result_file] = e
                raise
            read[result_file] = [ll for ll in loglines if ll.key in ("run_start", "run_stop")]
        if isinstance(read[result_file], ValueError):
            raise read[result_file]
        return read[result_file]

    mlp_compliance.main = spy
    result_summarizer._read_result_file = memo
    runs: list[Rows] = []
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            for _ in range(2):
                frame = result_summarizer.summarize_results(folder, "training", RULESET)[0]
                runs.append({row["details_url"]: row for row in frame.to_dict("records")})
    except Exception as e:
        return verdicts, {}, {}, f"{type(e).__name__}: {e}"
    finally:
        mlp_compliance.main = official_main
        result_summarizer._read_result_file = official_read
    return verdicts, runs[0], runs[1], ""


def _messages(checker: Any) -> list[str]:
    return [*checker.warnings.values(), *checker.overwritable.values(), *checker.not_overwritable]


def _official_file(path: str) -> Verdict:
    from mlperf_logging.compliance_checker import mlp_compliance

    logging.disable(logging.CRITICAL)
    mlp_compliance.enqueued_configs.clear()
    checker = mlp_compliance.make_checker("training", RULESET, False, False)
    try:
        return bool(mlp_compliance.main(path, f"training_{RULESET}/common.yaml", checker)[0]), _messages(checker), ""
    except Exception as e:
        return False, _messages(checker), type(e).__name__


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<dir>")
    return digest.hexdigest()


@pytest.mark.integration
def test_a_sample_of_the_round_matches_the_official_tools(v11_round: Path, tmp_path: Path) -> None:
    files, compared, scaled = _matches_the_official_tools(v11_round, tmp_path, rounds.SAMPLE)
    assert (files, compared, scaled) == SAMPLE_FIGURES


@pytest.mark.round
def test_whole_round_matches_the_official_tools(v11_round: Path, tmp_path: Path) -> None:
    files, compared, scaled = _matches_the_official_tools(v11_round, tmp_path)
    assert files > 1500 and compared > 50
    assert scaled >= 20  # the round holds scaled scores (22 with 4.1.68): the comparison cannot pass on raw ones


def _matches_the_official_tools(v11_round: Path, tmp_path: Path,
                                orgs: tuple[str, ...] | None = None) -> tuple[int, int, int]:
    """Every file verdict, raw and published score of the audit of ``orgs`` (all: None) of the unpacked round
    ``v11_round`` against the official tools; (files, published scores compared, of them scaled)."""
    ours_root = rounds.copy_orgs(v11_round, tmp_path / "ours", orgs)
    rounds.copy_orgs(v11_round, tmp_path / "official", orgs)  # the official tools write into it
    before = _tree_hash(ours_root)

    started = time.perf_counter()
    checks = check_round(ours_root, tmp_path / "out" / "checks.json", tmp_path / "out" / ".cache",
                         "training", RULESET, os.cpu_count() or 2)
    audit = pipeline.summarize(ours_root, checks, "training", RULESET)
    pipeline.write_summary(audit, tmp_path / "out")
    ours_s = time.perf_counter() - started
    assert _tree_hash(ours_root) == before  # nothing written into the audited package

    started = time.perf_counter()
    orgs = sorted((p for p in (tmp_path / "official").iterdir() if p.is_dir()), key=_size, reverse=True)
    official: dict[str, Verdict] = {}
    raw: dict[str, Rows] = {}
    scores: dict[str, Rows] = {}
    crashes: dict[str, str] = {}
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        for org, (verdicts, first, rows, crash) in zip(orgs, pool.map(_official_org, map(str, orgs)), strict=True):
            official.update(verdicts)
            raw[org.name] = first
            scores[org.name] = rows
            if crash:
                crashes[org.name] = crash
        every = discover.result_files(discover.find_orgs(tmp_path / "official"))
        rest = [f for f in every if f not in official]
        official.update(zip(rest, pool.map(_official_file, rest, chunksize=8), strict=True))
    official_s = time.perf_counter() - started
    print(f"\naudit {ours_s:.1f} s; official summarizer + checker {official_s:.1f} s; "
          f"summarizer crashed on {crashes or 'no organisation'}")

    # verdicts and messages, every file
    assert len(official) == len(checks["files"]) == len(every)
    prefix = str(tmp_path / "official")
    mismatched = []
    for path, (valid, messages, crash) in official.items():
        rec = checks["files"][str(ours_root) + path[len(prefix):]]
        # messages quote no path, so they compare as they are
        if (rec["valid"], rec["messages"], rec["crash"].split(":")[0]) != (valid, messages, crash):
            mismatched.append(path)
    assert not mismatched, mismatched[:10]

    # scores as published (the second run) and raw (the first), every organisation where the summarizer completes
    ours = {r["details_url"]: r for r in audit["rows"]}
    benchmarks = ("bert", "dlrm", "maskrcnn", "minigo", "resnet", "ssd", "rnnt", "unet3d")
    compared = scaled = 0
    for org, rows in scores.items():
        for url, row in rows.items():
            mine = ours[url]
            for b in benchmarks:
                theirs = row[b]
                if theirs is None or (isinstance(theirs, float) and math.isnan(theirs)):
                    assert mine[b] is None, (org, url, b)
                else:
                    assert mine[b] is not None and abs(mine[b] - theirs) <= 1e-9, (org, url, b, mine[b], theirs)
                    first = raw[org][url][b]
                    assert abs(mine[f"{b}:raw_score"] - first) <= 1e-9, (org, url, b)
                    # v1.1 packages carry no scaling.json: the factor used is the computed one
                    assert mine[f"{b}:submitted_factor"] is None and mine.get(f"{b}:factor_check") != "DISAGREE"
                    assert abs(mine[f"{b}:rcp_norm_factor"] * first - theirs) <= 1e-9, (org, url, b)
                    compared += 1
                    scaled += theirs != first
    print(f"compared {compared} published scores, {scaled} of them scaled")
    assert audit["seed_tables"]["closed"]
    return len(every), compared, scaled
