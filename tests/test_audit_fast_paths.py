"""The audit's fast paths (``fastpath.install``) give the official checker's own results.

orjson gives ``json.loads``'s values wherever ``parse`` lets it decode (every fixture line, edge
cases, random numbers), and the parse of a worker equals the untouched parser's, errors included;
the per-config key filter leaves verdicts and messages as the untouched checker gives them, also
under a ruleset whose stable diffusion rules read and extend the checker's list of lines.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import multiprocessing
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from mlperf_logging.compliance_checker import mlp_compliance

from mlrepro.audit import engine, fastpath
from mlrepro.audit.cache import Cache
from mlrepro.audit.check import check_files

FIXTURES = Path(__file__).parent / "fixtures" / "audit"
TOKEN = ":::MLLOG "


def _outcome(function: Any, text: str) -> tuple[str, Any]:
    try:
        return "value", function(text)
    except Exception as e:
        return "error", (type(e), str(e))


def _random_numbers(count: int) -> list[str]:
    """Decimal literals of every shape JSON allows: long and short mantissas, far exponents, halfway cases."""
    rng = random.Random(25)
    numbers = ["2.2250738585072011e-308", "4.9406564584124654e-324", "2.4703282292062327e-324",
               "1.7976931348623157e308", "9007199254740993.0", "0.1", "-0.0", "-0", "1E5", "1e-400", "5e-324"]
    for _ in range(count):
        mantissa = rng.choice(["", "-"]) + str(rng.randrange(10 ** rng.randrange(1, 19)))
        if rng.random() < 0.7:
            mantissa += "." + "".join(rng.choices("0123456789", k=rng.randrange(1, 40)))
        if rng.random() < 0.5:
            mantissa += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randrange(0, 330))
        numbers.append(mantissa)
    return numbers


def test_orjson_gives_json_values_where_parse_uses_it() -> None:
    bodies = [line.split(TOKEN, 1)[1].strip() for path in sorted(FIXTURES.rglob("result_*.txt"))
              for line in path.open(encoding="latin-1") if TOKEN in line]
    bodies += ["{}", "{} ", "{}x", '{"a": 1}{"b": 2}', "{", '{"a": NaN, "b": -Infinity}', '{"a": 1e400}',
               '{"a": 1, "b": 2, "a": 3}', '{"k": "\\ud800"}', '{"k": "\\udc00\\ud800"}', '{"k": "\t"}', "{\ufeff}",
               '{"k": "\x7f\xe9\u2028"}', '{"a": 01}', '{"a": 1.}', '{"a": .5}', '{"a": +1}', '{"a": 1e}',
               '{"a":\xa01}', '{"a": 1\x0b}', '{"a": -01}', '{"a": 1.0e+}', '{"a": 0.0000000000000000000001e330}',
               '{"a": [1, 2,]}', '{"a": 1,}', "{'a': 1}", '{"a": 1} // x', '{"a": tru}', '{"a": "\\x41"}',
               *('{"a": ' + "[" * n + "]" * n + "}" for n in (100_000, 1023, 1000, 400)),
               '{"n": ' + "9" * 5000 + "}", '{"n": 18446744073709551615, "m": -9223372036854775808}']
    bodies += [f'{{"v": {n}}}' for n in _random_numbers(20_000)]
    used = 0
    for body in bodies:
        if not fastpath._orjson_exact([TOKEN + body], TOKEN):
            continue
        used += 1
        mine, theirs = _outcome(orjson.loads, body), _outcome(json.loads, body)
        if mine[0] == "error":  # parse takes json's way for the whole log
            assert issubclass(mine[1][0], ValueError), body[:80]
        else:  # NaN != NaN: compare the JSON texts (they tell 1 from 1.0, and keep the keys' order)
            assert theirs[0] == "value" and json.dumps(mine[1]) == json.dumps(theirs[1]), body[:80]
    assert used > 20_000
    # integers beyond 64 bits, which orjson turns into floats, keep a log from orjson; fractions do not
    for body in ('{"a": 18446744073709551616}', '{"a": -9223372036854775809}', '{"a": [1, 123456789012345678901]}',
                 '{"a": 1e-0000000000000000000400}'):
        assert not fastpath._orjson_exact([TOKEN + '{"a": 1}', TOKEN + body], TOKEN), body
    big = '{"a": 18446744073709551616}'
    assert json.dumps(orjson.loads(big)) != json.dumps(json.loads(big))  # 1.8446744073709552e+19 (== 2**64)
    assert fastpath._orjson_exact([TOKEN + '{"a": 0.0020739051266588176, "b": -123456789012345678}'], TOKEN)
    assert not fastpath._orjson_exact([TOKEN + '{"a": 1}', TOKEN + ' {"a": 1}'], TOKEN)  # an object first only
    # nested about the recursion limit deep, json raises RecursionError where orjson gives a value
    deep = '{"a": ' + "[" * 1000 + "]" * 1000 + "}"
    assert _outcome(json.loads, deep)[1][0] is RecursionError and _outcome(orjson.loads, deep)[0] == "value"
    assert not fastpath._orjson_exact([TOKEN + deep], TOKEN)


def _parse_outcome(lines: list[str], ruleset: str) -> tuple[str, Any]:
    """(LogLines, failures) as text (NaN != NaN; repr tells 1 from 1.0 and -0.0 from 0.0), or the error."""
    try:
        loglines, failed = engine.parse(lines, ruleset)
    except Exception as e:
        return "error", type(e).__name__
    return "value", (repr(loglines), failed)


def _fast_parse(task: tuple[list[str], str]) -> tuple[str, Any]:
    """engine.parse in a process with the fast paths installed, as the audit's workers have them."""
    fastpath.install()
    return _parse_outcome(*task)


@pytest.mark.parametrize("ruleset", ["1.1.0", "4.1.0"])
def test_fast_parse_equals_the_official_parser(ruleset: str) -> None:
    def lines(path: Path, extra: list[str] = []) -> list[str]:  # noqa: B006 (read only)
        return engine.log_lines(path.read_bytes(), ruleset) + [TOKEN + e for e in extra]

    paths = sorted(FIXTURES.rglob("result_*.txt"))
    good = '{"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "k", "value": %s, "metadata": {}}'
    logs = [lines(p) for p in paths]
    logs += [lines(paths[0], [good % v]) for v in ("NaN", "18446744073709551616", '"\\ud800"', "1e400", "[]",
                                                  "0.30000000000000004", "-9223372036854775809")]
    logs += [lines(paths[0], ["not json"]), lines(paths[0], ['{"time_ms": 1, "value": 1, "metadata": {}}']),
             lines(paths[0], ["[1]"]), lines(paths[0], [good.replace('"time_ms": 1', '"time_ms": "1.2.3"') % 1])]
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        fast = list(pool.map(_fast_parse, [(log, ruleset) for log in logs]))
    assert not fastpath._FAST  # this process parses with the untouched parser
    official = [_parse_outcome(log, ruleset) for log in logs]
    assert fast == official
    assert {kind for kind, _ in official} == {"value", "error"} and any(v[1] for k, v in official if k == "value")
    assert "nan" in official[len(paths)][1][0]  # the NaN log parses (json's way), as officially


def test_with_keys_skips_unhashable_keys_as_the_official_loop_does() -> None:
    line = mlp_compliance.mlp_parser.ruleset_110.LogLine
    lines = [line("", 0.0, key, {"value": None, "metadata": {}}, i)
             for i, key in enumerate(["run_start", ["run_start"], 5, "run_stop", {"a": 1}, "run_start"])]
    assert [ll.lineno for ll in fastpath._with_keys(lines, frozenset({"run_start", "run_stop"}))] == [0, 3, 5]
    assert [ll.lineno for ll in fastpath._with_keys(lines[:1] + lines[3:4], frozenset({"run_stop"}))] == [3]


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



def test_the_cache_file_serves_a_rerun_and_a_bad_entry_is_checked_again(tmp_path: Path) -> None:
    sources = sorted((FIXTURES / "round").rglob("result_*.txt"))[:3]
    files = [str(p) for p in sources] + [str(tmp_path / "twin.txt")]
    (tmp_path / "twin.txt").write_bytes(sources[0].read_bytes())  # same content, another path
    cache = Cache(tmp_path / "cache", "training", "1.1.0")
    first = check_files(files, cache, "training", "1.1.0", 2)
    assert sorted(first.checked) == sorted(files)  # a twin is checked too: only what was cached before counts
    again = check_files(files, cache, "training", "1.1.0", 2)
    assert again.checked == [] and {p: r.to_dict() for p, r in again.records.items()} == \
        {p: r.to_dict() for p, r in first.records.items()}
    # an entry that does not read as a record, or under another hash, is checked again
    doc = json.loads(cache.path.read_text())
    digests = [first.records[f].sha256 for f in files[:3]]
    doc[digests[1]] = ["not", "a", "record"]
    doc[digests[2]] = {**doc[digests[2]], "sha256": "0" * 64}
    cache.path.write_text(json.dumps(doc))
    assert sorted(check_files(files, cache, "training", "1.1.0", 2).checked) == sorted(files[1:3])
    cache.path.write_text("{ not json")  # an unreadable cache is an empty one
    assert sorted(check_files(files, cache, "training", "1.1.0", 2).checked) == sorted(files)


def _worker_is_unpatched(fast: bool) -> bool:
    engine.start_worker(fast)
    return mlp_compliance.yaml.__class__.__name__ == "module" and not fastpath._FAST


def test_without_fast_paths_the_check_gives_the_same_records(tmp_path: Path) -> None:
    """audit_fast_paths: false (check_files(fast=False)): workers run the checker as it ships, with the same records."""
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(_worker_is_unpatched, False).result()
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert not pool.submit(_worker_is_unpatched, True).result()
    files = [str(p) for p in sorted(FIXTURES.rglob("result_*.txt"))]
    runs = [check_files(files, Cache(tmp_path / str(fast), "training", "1.1.0"), "training", "1.1.0", 2, FIXTURES,
                        fast=fast) for fast in (True, False)]
    assert len(runs[0].records) > 10
    assert {p: r.to_dict() for p, r in runs[0].records.items()} == {p: r.to_dict() for p, r in runs[1].records.items()}
