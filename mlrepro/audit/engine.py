"""The audit's compliance engine: the official checker as it ships (``mlrepro.core.checker``), which
the submitter's gate runs too, and in the audit's worker processes the fast paths of ``fastpath``
(a separate equivalence, tested against the unpatched checker), unless the audit is told not to.

Nothing here replaces or wraps anything of ``mlperf_logging``.
"""

from __future__ import annotations

from mlrepro.audit import fastpath
from mlrepro.core.checker import ParseError, config_file, log_lines, messages, parser_module, run_checker

__all__ = ["ParseError", "config_file", "log_lines", "messages", "parse", "parser_module", "run_checker",
           "start_worker"]

parse = fastpath.parse  # checker.parse until a worker installs the fast paths


def start_worker(fast: bool) -> None:
    """Set up an audit worker process: the fast paths where ``fast``, else the checker as it ships."""
    if fast:
        fastpath.install()
