"""Verdicts cached by file content: a re-run re-checks only the files whose bytes changed."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

from mlrepro.audit import versions
from mlrepro.audit.runfile import FileCheck
from mlrepro.core import atomic

# Bump when FileCheck's content or the way it is computed changes: old entries then miss.
SCHEMA = 2


class Cache:
    """One JSON file per (content hash, usage, ruleset, mlperf_logging version, schema)."""

    def __init__(self, root: Path, usage: str, ruleset: str) -> None:
        judge = versions.current()  # a version's folder: keyed by its sources, whatever its name says
        release = version("mlperf-logging") if judge is None else f"tree-{judge.digest[:16]}"
        self.root = root / f"{usage}_{ruleset}" / f"mlperf_logging-{release}-s{SCHEMA}"

    def _path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / f"{sha256}.json"

    def known(self) -> frozenset[str]:
        """The content hashes cached now (whether their records still read is get's to say)."""
        return frozenset(p.stem for p in self.root.glob("??/*.json"))

    def get(self, sha256: str) -> FileCheck | None:
        try:
            return FileCheck.from_dict(json.loads(self._path(sha256).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):  # absent or unreadable: check the file again
            return None

    def put(self, rec: FileCheck) -> None:
        atomic.write_text(self._path(rec.sha256), json.dumps(rec.to_dict()))
