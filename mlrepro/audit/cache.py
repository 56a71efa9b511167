"""Verdicts cached by file content: a re-run re-checks only the files whose bytes changed."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

from mlrepro.audit.runfile import FileCheck
from mlrepro.core import atomic, versions

# Bump when FileCheck's content, the way it is computed or the cache's layout changes: old entries then miss.
SCHEMA = 4


class Cache:
    """One JSON file per (usage, ruleset, mlperf_logging version, schema): content hash -> record.

    Read once before a check run and written once after it: one file per record cost a round's
    check more than a second in creating, renaming and syncing small files."""

    def __init__(self, root: Path, usage: str, ruleset: str) -> None:
        judge = versions.current()  # a version's folder: keyed by its sources, whatever its name says
        release = version("mlperf-logging") if judge is None else f"tree-{judge.digest[:16]}"
        self.path = root / f"{usage}_{ruleset}" / f"mlperf_logging-{release}-s{SCHEMA}.json"

    def load(self) -> dict[str, FileCheck]:
        """The records cached now, by content hash; an entry that does not read as a record is left out
        (its file is checked again), an unreadable cache is empty."""
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        records = {}
        for sha256, entry in doc.items() if isinstance(doc, dict) else ():
            try:
                rec = FileCheck.from_dict(entry)
            except (TypeError, AttributeError):
                continue
            if rec.sha256 == sha256:
                records[sha256] = rec
        return records

    def save(self, records: dict[str, FileCheck]) -> None:
        """Replace the cache by ``records`` (content hash -> record), atomically."""
        atomic.write_text(self.path, json.dumps({sha256: rec.to_dict() for sha256, rec in records.items()}))
