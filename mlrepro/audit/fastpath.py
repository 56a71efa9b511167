"""The audit's fast paths: faster runs of ``mlperf_logging``'s compliance engine with the same results.

A separate equivalence, not the checker: the submitter's gate never uses it, and the audit uses it
only in its own worker processes, unless told not to (``audit_fast_paths: false``, the checker as it
ships, ``mlrepro.core.checker``). Its verdicts and messages equal the unpatched checker's on every
result file of the public v1.1 round (tests/test_audit_round.py, ``pytest -m round``; a sample in the
integration tier) and on the fixtures and edge cases of tests/test_audit_fast_paths.py. These costs of
the official run are removed:

* the rule YAML files are parsed once per process instead of once per config per log file
  (``yaml.load`` in pure Python is most of the official checker's time);
* the CHECK/PRE/POST snippets are compiled once instead of at every ``eval``/``exec``;
* each config's pass over the log sees only the lines whose key the config names: the official
  loop skips every other line without touching anything (``_known_keys_only``), at the cost of a
  raised and caught KeyError per line and config;
* the log's lines are decoded by orjson instead of ``json``, twice as fast, where that gives the
  same values (``_Orjson``: every line a JSON object, no integer beyond 64 bits; a line orjson
  refuses sends the log through ``json`` again).

:func:`install` puts them into this process's ``mlperf_logging`` modules (it replaces their
``yaml``, ``eval``, ``exec``, ``re`` and ``json`` and wraps ``configured_checks``), so only the
audit's workers call it. Where a release's own tools run as they are (``official``), it also gives
their modules a ``re`` whose ``sub(".*" + TOKEN, TOKEN, line)`` cuts the line with ``str.rsplit``
(the cut ``mlrepro.core.checker.log_lines`` makes; any other call is ``re``'s own).
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
import sys
from collections.abc import Callable
from typing import Any

import orjson
import yaml
from mlperf_logging.compliance_checker import mlp_compliance

from mlrepro.core import checker


def parse(lines: list[str], ruleset: str) -> tuple[list[Any], list[checker.ParseError]]:
    """``checker.parse``, with orjson decoding where :func:`install` ran and orjson is exact on ``lines``."""
    module = checker.parser_module(ruleset)
    if _FAST and _orjson_exact(lines, module.TOKEN):
        # orjson gives json.loads's values here, or raises a ValueError (then json's own way below)
        plain, module.json = module.json, _ORJSON
        try:  # every line parses, as in nearly every log: the calls without a Python loop around them
            return list(map(module.string_to_logline, itertools.count(), lines)), []
        except ValueError:
            pass
        finally:
            module.json = plain
    return checker.parse(lines, ruleset)


class _CachedYaml:
    """Stands in for the ``yaml`` module inside mlp_compliance: each rule file is parsed once."""

    BaseLoader = yaml.BaseLoader

    def __init__(self) -> None:
        self._docs: dict[tuple[str, Any], Any] = {}

    def load(self, stream: Any, Loader: Any) -> Any:
        key = (stream.name, Loader)
        if key not in self._docs:
            self._docs[key] = yaml.load(stream, Loader=Loader)
        return self._docs[key]


@functools.lru_cache(maxsize=4096)
def _compiled(source: str, mode: str) -> Any:
    # dont_inherit: the snippet must not pick up this module's __future__ flags.
    return compile(source, "<string>", mode, dont_inherit=True)


def _eval(source: Any, globals_: Any = None, locals_: Any = None) -> Any:
    return eval(_compiled(source, "eval") if isinstance(source, str) else source, globals_, locals_)


def _exec(source: Any, globals_: Any = None, locals_: Any = None) -> None:
    exec(_compiled(source, "exec") if isinstance(source, str) else source, globals_, locals_)


class _LineCuttingRe:
    """Stands in for ``re`` inside mlperf_logging's modules: ``sub(".*" + LITERAL, REPL, line)``, which
    they use to cut a log line at its last token, without the quadratic backtracking.

    For a line with no newline but at its end, no flags, no count and a replacement without
    escapes, the greedy ``.*LITERAL`` matches from the start to the end of the literal's last
    occurrence, once: the result is REPL and the text after it. Every other call goes to ``re``.
    """

    _META = frozenset(".^$*+?{}[]\\|()")

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    def sub(self, pattern: Any, repl: Any, string: Any, count: int = 0, flags: int = 0) -> Any:
        if (isinstance(pattern, str) and pattern.startswith(".*") and len(pattern) > 2
                and not self._META.intersection(pattern[2:]) and isinstance(repl, str) and "\\" not in repl
                and isinstance(string, str) and "\n" not in string[:-1] and count == 0 and flags == 0):
            literal = pattern[2:]
            return repl + string.rsplit(literal, 1)[1] if literal in string else string
        return re.sub(pattern, repl, string, count=count, flags=flags)


class _Orjson:
    """Stands in for ``json`` in the ruleset's parser module while ``parse`` parses a log whose lines
    all hold one JSON object after the token and no long integer (``_orjson_exact``): ``loads`` is
    orjson's, twice as fast as ``json``'s.

    On such text orjson gives ``json.loads``'s values: the same dicts (a repeated key keeps its first
    place and its last value), strings and correctly rounded floats. Where the two differ, orjson
    raises a ValueError (NaN and Infinity, a lone surrogate escape, a float out of range, nesting
    deeper than 1024), and ``parse`` parses the log again with ``json``; what ``_orjson_exact``
    keeps out is where orjson gives a value and ``json`` does not, or another one: an integer beyond
    64 bits (a float from orjson), nesting about as deep as the recursion limit (RecursionError from
    ``json``). Every other name is ``json``'s own.
    """

    loads = staticmethod(orjson.loads)

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)


_ORJSON = _Orjson()
_FAST = False  # install: parse uses orjson where it is exact

# A byte table that keeps ASCII digits as "0" and "." as itself and makes every other byte a space:
# in the translated text, " " and 19 "0" are a run of 19 digits that no decimal point precedes.
_DIGITS = bytes(48 if 48 <= b <= 57 else 46 if b == 46 else 32 for b in range(256))
_LONG_RUN = b" " + b"0" * 19


def _orjson_exact(lines: list[str], token: str) -> bool:
    """Whether orjson decodes ``lines`` as ``json`` does, or raises a ValueError where it does not.

    Every line must be the token and a JSON object (``{`` first, as ``log_lines`` gives them) nested
    less than half the recursion limit deep (``json`` raises RecursionError, not ValueError, about
    the limit, where orjson goes on to depth 1024), and no run of 19 or more digits may follow
    anything but a decimal point: then no integer literal lies outside orjson's 64 bits (a run after
    a point is a fraction's, which orjson rounds as ``json`` does; one after an exponent's sign
    counts as long, to be safe)."""
    if not all(map(str.startswith, lines, itertools.repeat(token + "{"))):
        return False
    depth = sys.getrecursionlimit() // 2  # a line nested this deep has this many brackets, twice as many characters
    if max(map(len, lines), default=0) >= 2 * depth and any(
            line.count("{") + line.count("[") >= depth for line in lines if len(line) >= 2 * depth):
        return False
    text = (" " + "\n".join(lines)).encode("latin-1", errors="replace")  # a log's characters are latin-1
    return _LONG_RUN not in text.translate(_DIGITS)


def _names_loglines(config: Any) -> bool:
    """Whether a config's BEGIN code may touch the checker's ``loglines`` (stable diffusion's rules
    aggregate and append lines there; from 4.1 BEGIN runs with ``configured_checks``'s locals)."""
    blocks = [x for x in config if next(iter(x)) == "BEGIN"]
    return any("loglines" in str(b["BEGIN"].get("CODE", "")) or "locals" in str(b["BEGIN"].get("CODE", ""))
               for b in blocks)


_KEY = operator.attrgetter("key")


def _with_keys(loglines: list[Any], keys: frozenset[str]) -> list[Any]:
    """The lines whose key is one of ``keys``, in order (an unhashable key is none of them)."""
    try:
        return list(itertools.compress(loglines, map(keys.__contains__, map(_KEY, loglines))))
    except TypeError:  # a key that is a JSON list or object: the line by line way
        return [ll for ll in loglines if isinstance(ll.key, str) and ll.key in keys]


def _known_keys_only(configured_checks: Callable[..., Any]) -> Callable[..., Any]:
    """``configured_checks`` that passes on only the log lines whose key the config names.

    The official loop starts each line with ``reported_values[line.key]``, built from the config's
    KEY names, and skips the line on the exception (an unknown or unhashable key) before it has
    changed anything; so the skipped lines can be left out beforehand. Unless the config's BEGIN
    code reads ``loglines`` itself, or the config does not read as expected (then the official
    code meets the same problem on the full list)."""

    @functools.wraps(configured_checks)
    def wrapper(self: Any, loglines: list[Any], config_file: str) -> Any:
        try:
            keys = _rule_keys(config_file)
        except Exception:  # the official code on the full list: its own verdict or error
            keys = None
        return configured_checks(self, loglines if keys is None else _with_keys(loglines, keys), config_file)

    return wrapper


@functools.cache
def _rule_keys(config_file: str) -> frozenset[str] | None:
    """The KEY names of a rule file (read once, as ``_CachedYaml`` reads it), or None where its BEGIN
    code may read every line."""
    with open(config_file) as f:
        config = mlp_compliance.yaml.load(f, Loader=yaml.BaseLoader)
    if _names_loglines(config):
        return None
    return frozenset(k["KEY"]["NAME"] for k in config if next(iter(k)) == "KEY")


def install() -> None:
    """Cache rule files and compiled snippets in this process's mlp_compliance, let each config's pass
    see only its keys, and parse JSON objects and cut lines without the Python layers and backtracking
    in every loaded mlperf_logging module (the audit's workers only)."""
    mlp_compliance.yaml = _CachedYaml()  # type: ignore[attr-defined]
    mlp_compliance.eval = _eval  # type: ignore[attr-defined]
    mlp_compliance.exec = _exec  # type: ignore[attr-defined]
    checker = mlp_compliance.ComplianceChecker
    if not hasattr(checker.configured_checks, "__wrapped__"):
        checker.configured_checks = _known_keys_only(checker.configured_checks)  # type: ignore[method-assign]
    global _FAST
    _FAST = True
    cutter = _LineCuttingRe()
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] == "mlperf_logging" and getattr(module, "re", None) is re:
            module.re = cutter  # type: ignore[attr-defined]
