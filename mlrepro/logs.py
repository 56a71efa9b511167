"""Reading MLPerf result logs (``:::MLLOG {json}`` lines)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PREFIX = ":::MLLOG "


def events(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            _, sep, payload = line.partition(PREFIX)
            if sep:
                yield json.loads(payload)


def run_window(path: Path) -> tuple[int, int]:
    """``time_ms`` of run_start and run_stop: time to train is their difference."""
    start = stop = None
    for e in events(path):
        if e["key"] == "run_start":
            start = int(e["time_ms"])
        elif e["key"] == "run_stop":
            stop = int(e["time_ms"])
    if start is None or stop is None:
        raise ValueError(f"{path}: no {'run_start' if start is None else 'run_stop'} event")
    return start, stop


def run_status(path: Path) -> str | None:
    for e in events(path):
        if e["key"] == "run_stop":
            return str((e.get("metadata") or {}).get("status"))
    return None
