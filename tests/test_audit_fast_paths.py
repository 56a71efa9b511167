"""The engine's fast paths (``engine.install_fast_paths``) give the official checker's own results.

The JSON stand-in equals ``json.loads`` on every fixture line and on edge cases, errors included;
the per-config key filter leaves verdicts and messages as the untouched checker gives them, also
under a ruleset whose stable diffusion rules read and extend the checker's list of lines.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import multiprocessing
import re
from pathlib import Path
from typing import Any

import pytest
from mlperf_logging.compliance_checker import mlp_compliance

from mlrepro.audit import engine
from mlrepro.audit.cache import Cache
from mlrepro.audit.check import check_files

FIXTURES = Path(__file__).parent / "fixtures" / "audit"
TOKEN = ":::MLLOG "


def _outcome(function: Any, text: str) -> tuple[str, Any]:
    try:
        return "value", function(text)
    except Exception as e:
        return "error", (type(e), str(e))


def test_object_loads_equals_json_loads() -> None:
    bodies = [line.split(TOKEN, 1)[1].strip() for path in sorted(FIXTURES.rglob("result_*.txt"))
              for line in path.open(encoding="latin-1") if TOKEN in line]
    bodies += ["{}", "{} ", "{}x", '{"a": 1}{"b": 2}', "{", '{"a": NaN, "b": -Infinity}', '{"a": 1e400}',
               '{"a": 1, "a": 2}', '{"k": "\\ud800"}', '{"k": "\t"}', "\ufeff{}", " {}", "[]", "", "1",
               '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", '{"n": ' + "9" * 5000 + "}"]
    loads = engine._ObjectLoads()
    assert len(bodies) > 1000
    for body in bodies:
        mine, theirs = _outcome(loads.loads, body), _outcome(json.loads, body)
        if mine[0] == "value" and theirs[0] == "value":  # NaN != NaN: compare the JSON texts (keys in order)
            assert json.dumps(mine[1]) == json.dumps(theirs[1]), body[:80]
        else:
            assert mine == theirs, body[:80]
    assert loads.load is json.load  # everything else is json's own


def test_with_keys_skips_unhashable_keys_as_the_official_loop_does() -> None:
    line = mlp_compliance.mlp_parser.ruleset_110.LogLine
    lines = [line("", 0.0, key, {"value": None, "metadata": {}}, i)
             for i, key in enumerate(["run_start", ["run_start"], 5, "run_stop", {"a": 1}, "run_start"])]
    assert [ll.lineno for ll in engine._with_keys(lines, frozenset({"run_start", "run_stop"}))] == [0, 3, 5]
    assert [ll.lineno for ll in engine._with_keys(lines[:1] + lines[3:4], frozenset({"run_stop"}))] == [3]


def _official(task: tuple[str, str]) -> tuple[bool, list[str], str]:
    """What the untouched checker decides (and the exception it dies of), in a spawned process."""
    path, ruleset = task
    logging.disable(logging.CRITICAL)
    mlp_compliance.enqueued_configs.clear()  # a fresh process, as the CLI has one per file
    checker = mlp_compliance.make_checker("training", ruleset, False, False)
    try:
        return bool(mlp_compliance.main(path, f"training_{ruleset}/common.yaml", checker)[0]), \
            engine.messages(checker), ""
    except Exception as e:  # e.g. no rules for stable diffusion in 1.1.0
        return False, engine.messages(checker), type(e).__name__


def _as(benchmark: str, source: Path, dest: Path, extra: list[str]) -> Path:
    """``source`` as a log of ``benchmark`` (its submission_benchmark value), with ``extra`` lines."""
    text = re.sub(r'("key": "submission_benchmark", "value": )"\w+"', rf'\1"{benchmark}"',
                  source.read_text(encoding="latin-1"))
    dest.write_text(text + "".join(f"{TOKEN}{line}\n" for line in extra), encoding="latin-1")
    return dest


@pytest.mark.parametrize("ruleset", ["1.1.0", "4.1.0"])
def test_filtered_configs_give_the_official_verdicts(ruleset: str, tmp_path: Path) -> None:
    # 4.1.0's stable diffusion rules read and extend ``loglines`` in BEGIN: those configs get every line
    extra = ['{"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": ["run_start"], "value": 1, '
             '"metadata": {}}',
             '{"namespace": "", "time_ms": 2, "event_type": "POINT_IN_TIME", "key": 7, "value": 1, "metadata": {}}',
             '{"namespace": "", "time_ms": 3, "event_type": "POINT_IN_TIME", "key": "eval_accuracy", "value": 0.1, '
             '"metadata": {"samples_count": 64, "metric": "FID"}}']
    sources = sorted((FIXTURES / "round").rglob("result_*.txt"))[:3]
    files = [str(_as(benchmark, source, tmp_path / f"{benchmark}_{i}.txt", extra))
             for i, source in enumerate(sources) for benchmark in ("bert", "stable_diffusion", "resnet")]
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        official = dict(zip(files, pool.map(_official, [(f, ruleset) for f in files]), strict=True))
    run = check_files(files, Cache(tmp_path / "cache", "training", ruleset), "training", ruleset, 2, tmp_path)
    for path, (valid, messages, crash) in official.items():
        rec = run.records[path]
        assert (rec.valid, rec.messages, rec.crash.split(":")[0]) == (valid, messages, crash), path
    assert any(messages for _, messages, _ in official.values())

