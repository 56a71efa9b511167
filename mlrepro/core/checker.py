"""The official compliance checker of ``mlperf_logging``, as it ships, on a result file's bytes.

``python -m mlperf_logging.compliance_checker`` runs ``ComplianceChecker.check_file``: the ruleset's
``parse_file`` (``strip_and_dedup``, then ``string_to_logline`` per line), then ``check_loglines``.
Here the same calls run unpatched, with one difference in how the file is split into lines: each
``:::MLLOG`` line is cut at its last token with ``str.rsplit`` instead of ``strip_and_dedup``'s
``re.sub(".*TOKEN")``, whose backtracking is quadratic in the line length (a 50 MB line never
ends). For lines read in text mode (no ``\\n`` inside a line) both keep exactly the text after the
last token (tests/test_audit_line_cutting.py). The submitter's gate and the audit both check through
this module; nothing of ``mlperf_logging`` is replaced or wrapped.
"""

from __future__ import annotations

import functools
import importlib
import io
import itertools
from types import ModuleType
from typing import Any

from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

# A parse failure: (stripped line, error text), as mlp_parser returns it.
ParseError = tuple[str, str]


@functools.cache
def parser_module(ruleset: str) -> ModuleType:
    """The per-ruleset parser module that ``mlp_parser.parse_file`` dispatches to."""
    try:
        return importlib.import_module(f"{mlp_parser.__name__}.ruleset_{ruleset.replace('.', '')}")
    except ModuleNotFoundError:
        raise ValueError(f"mlperf_logging has no log parser for ruleset {ruleset!r}") from None


def log_lines(data: bytes, ruleset: str) -> list[str]:
    """The ``:::MLLOG`` lines of a log as the official parser sees them (stripped, token first).

    Decoding is latin-1 and newlines universal, as ``open(filename, encoding='latin-1')`` does.
    """
    token: str = parser_module(ruleset).TOKEN
    text = io.TextIOWrapper(io.BytesIO(data), encoding="latin-1")
    return [(token + line.rsplit(token, 1)[1]).strip() for line in text if token in line]


def parse(lines: list[str], ruleset: str) -> tuple[list[Any], list[ParseError]]:
    """``parse_generator`` of the ruleset over already stripped lines: (LogLines, failures).

    Like the official parser, only ValueError marks a bad line; anything else (a JSON object
    without "key", a JSON list) propagates, as it crashes the official checker.
    """
    module = parser_module(ruleset)
    try:  # every line parses, as in nearly every log: the calls without a Python loop around them
        return list(map(module.string_to_logline, itertools.count(), lines)), []
    except ValueError:  # a bad line: line by line, to collect every failure
        pass
    loglines: list[Any] = []
    failed: list[ParseError] = []
    for lineno, line in enumerate(lines):
        try:
            loglines.append(module.string_to_logline(lineno, line))
        except ValueError as e:
            failed.append((line, str(e)))
    return loglines, failed


def config_file(usage: str, ruleset: str) -> str:
    return f"{usage}_{ruleset}/common.yaml"


def run_checker(checker: mlp_compliance.ComplianceChecker, loglines: list[Any], failed: list[ParseError],
                usage: str, ruleset: str) -> bool:
    """``ComplianceChecker.check_file`` on parsed lines (without its logging): True when valid."""
    # A checker that raised mid-way leaves configs queued in this module-level list; the next
    # file would be checked against them. One process per file (the official CLI) never sees it.
    mlp_compliance.enqueued_configs.clear()
    if failed:
        checker.put_message("Log lines had parsing errors.")
    checker.check_loglines(loglines, config_file(usage, ruleset))
    return not checker.has_messages()


def messages(checker: mlp_compliance.ComplianceChecker) -> list[str]:
    """The messages the official checker logs, in its order."""
    return [*checker.warnings.values(), *checker.overwritable.values(), *checker.not_overwritable]
