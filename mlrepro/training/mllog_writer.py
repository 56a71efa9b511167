"""One run's MLPerf log, written with ``mlperf_logging.mllog`` to a file that appears only when complete."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import constants as _c
from mlperf_logging.mllog.mllog import MLLogger

from mlrepro import PROJECT_ROOT
from mlrepro.core import atomic


class RunLog:
    """An MLLogger bound to its own file handler (never the shared default logger).

    ``mllog.config(filename=...)`` adds a handler to one process-wide logger on every call, so two
    runs in one process would write into each other's files; a logger per run avoids that.
    """

    def __init__(self, path: Path | None, enabled: bool = True) -> None:
        """``path`` None: the log goes to stdout, where a run driver keeps its ``:::MLLOG`` lines.
        ``enabled=False`` (ranks other than 0 of a multi-process run): every event goes nowhere."""
        self.path = path
        self.partial = atomic.temp_name(path) if path else None  # unique: a second invocation never renames ours
        self._logger = logging.getLogger(f"mlrepro.mllog.{os.getpid()}.{path}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._handler: logging.Handler
        if not enabled:
            self._handler = logging.NullHandler()
        elif path is None or self.partial is None:
            self._handler = logging.StreamHandler(sys.stdout)
        else:
            self.partial.parent.mkdir(parents=True, exist_ok=True)
            self._handler = logging.FileHandler(self.partial, mode="w", encoding="utf-8")
        self._logger.addHandler(self._handler)
        self.ml = MLLogger(logger=self._logger, default_stack_offset=2, root_dir=str(PROJECT_ROOT))
        self.c = _c

    def event(self, key: str, value: Any = None, **metadata: Any) -> None:
        self.ml.event(key=key, value=value, metadata=metadata or None)

    def start(self, key: str, value: Any = None, **metadata: Any) -> None:
        self.ml.start(key=key, value=value, metadata=metadata or None)

    def end(self, key: str, value: Any = None, **metadata: Any) -> None:
        self.ml.end(key=key, value=value, metadata=metadata or None)

    def commit(self) -> None:
        """Close the file and move it into place: only a finished run has a result file."""
        self._handler.flush()
        self._handler.close()
        self._logger.removeHandler(self._handler)
        if isinstance(self._handler, logging.FileHandler) and self.partial is not None and self.path is not None:
            os.replace(self.partial, self.path)
