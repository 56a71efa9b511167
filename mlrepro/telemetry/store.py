"""The sampler's files, written so that a killed sampler never leaves one that looks complete.

Samples are plain rows: JSON lines (one object per sample, every column of :data:`COLUMNS`, ``null`` where a value
is missing), gzip-compressed. They go out every few seconds as small chunks under ``.samples.chunks/`` (each a gzip
member written under a temporary name and renamed); only a clean stop joins them into ``samples.jsonl.gz`` (gzip
members concatenated are one gzip stream: ``zcat`` reads it). The sidecar says ``"status": "complete"`` only after
that, so a sampler killed mid-run leaves chunks (still readable, marked partial) and a sidecar that says it was still
running. Only the standard library: the sampler and the run driver start fast (no pyarrow in a run's hot path).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrepro.core import atomic, untrusted_dir
from mlrepro.telemetry.backend import GPU_FIELDS
from mlrepro.telemetry.host import HOST_FIELDS

SAMPLES = "samples.jsonl.gz"
CHUNKS = ".samples.chunks"
CHUNK_SUFFIX = ".jsonl.gz"
SIDECAR = "telemetry.json"
EVENTS = "events.jsonl"
SUMMARY = "summary.json"
LOG = "sampler.log"
# A run over several nodes: the batch host's sampler writes the files above into the telemetry folder, the
# other nodes' samplers theirs into NODES_DIR/<host>/, and NODES lists the nodes expected and how each started.
NODES = "nodes.json"
NODES_DIR = "nodes"
MAX_BYTES = 1 << 30  # of one samples file (gzip'd: hours of a node's samples are tens of MB)
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def host_folder(name: str) -> str:
    """A node's host name as the name of its folder under NODES_DIR; ValueError for one that is no plain name."""
    if not _HOST_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"host name {name!r} is not a plain name (letters, digits, '.', '_', '-')")
    return name

HOST_DEVICE = "host"
_FLOAT = {
    "power_instant_mw", "power_average_mw", "util_gpu_pct", "util_mem_pct", "host_cpu_pct", "proc_cpu_pct"
}
# every sample's columns: time_ms (time.time_ns() // 1e6, mllog's clock), tick (the deadline index; gaps are
# overruns), device ("host" or a GPU UUID), then the fields, each float or int
FIELDS: dict[str, type] = {f: float if f in _FLOAT else int for f in (*GPU_FIELDS, *HOST_FIELDS)}
COLUMNS: tuple[str, ...] = ("time_ms", "tick", "device", *FIELDS)


def _value(name: str, v: Any) -> int | float | None:
    """A field's value as its column's type; a missing or non-finite one is None. TypeError for one that is no number
    (a file the run's code rewrote)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name}: {v!r} is not a number")
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return int(v) if FIELDS[name] is int else float(v)  # a replayed or odd driver value may be a float in an int column


def _row(raw: dict[str, Any]) -> dict[str, Any]:
    """One sample in its columns' types, every column present; ValueError naming what is wrong."""
    try:
        time_ms, tick, device = raw["time_ms"], raw["tick"], raw["device"]
        if not (isinstance(time_ms, int) and isinstance(tick, int) and isinstance(device, str)) \
                or isinstance(time_ms, bool) or isinstance(tick, bool):
            raise TypeError(f"time_ms {time_ms!r}, tick {tick!r}, device {device!r}")
        return {"time_ms": time_ms, "tick": tick, "device": device,
                **{name: _value(name, raw.get(name)) for name in FIELDS}}
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"a sample that is not one: {type(e).__name__}: {e}") from None


@dataclass(frozen=True)
class Samples:
    """Rows of samples (each a dict of :data:`COLUMNS`), in the order they were taken."""

    rows: tuple[dict[str, Any], ...] = ()

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    def devices(self) -> set[str]:
        return {r["device"] for r in self.rows}

    def of(self, device: str) -> Samples:
        """One device's rows, by time."""
        return Samples(tuple(sorted((r for r in self.rows if r["device"] == device), key=lambda r: r["time_ms"])))

    def between(self, start_ms: float | None, stop_ms: float | None) -> Samples:
        return Samples(tuple(r for r in self.rows if (start_ms is None or r["time_ms"] >= start_ms)
                             and (stop_ms is None or r["time_ms"] <= stop_ms)))

    def column(self, name: str) -> list[Any]:
        """The column's values, None where missing."""
        return [r[name] for r in self.rows]


class SampleStore:
    """The sampler's rows, flushed as chunks and joined at a clean stop. Every file is written and read back in the
    telemetry folder without following a link (a run's code can write there: mlrepro/core/untrusted_dir.py), and
    only the chunks this store wrote are joined."""

    def __init__(self, out_dir: Path, flush_every_s: float = 5.0) -> None:
        self.out_dir = out_dir
        self.chunk_dir = out_dir / CHUNKS
        self.flush_every_s = flush_every_s
        self.rows: list[dict[str, Any]] = []
        self.chunks = 0
        self.total_rows = 0
        self._last_flush = time.monotonic()

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(_row(row))
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def _chunk(self, i: int) -> str:
        return f"{CHUNKS}/{i:06d}{CHUNK_SUFFIX}"

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self.rows:
            return
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in self.rows)
        untrusted_dir.write_bytes(self.out_dir, self._chunk(self.chunks),
                                  gzip.compress(text.encode(), compresslevel=6, mtime=0))
        self.chunks += 1
        self.total_rows += len(self.rows)
        self.rows = []

    def finalize(self) -> int:
        """Join the chunks into samples.jsonl.gz; return the number of rows."""
        self.flush()
        joined = b"".join(untrusted_dir.read_bytes(self.out_dir, self._chunk(i), MAX_BYTES, ours=True)
                          for i in range(self.chunks))
        untrusted_dir.write_bytes(self.out_dir, SAMPLES, joined)
        shutil.rmtree(self.chunk_dir, ignore_errors=True)  # a link there is not followed: rmtree refuses one
        return self.total_rows


def _chunk_files(chunk_dir: Path) -> list[Path]:
    return sorted(chunk_dir.glob(f"[0-9]*{CHUNK_SUFFIX}")) if chunk_dir.is_dir() else []


def _read(path: Path) -> list[dict[str, Any]]:
    """The rows of one file, read without following a link; ValueError naming it where it is not one of ours (cut
    short, not gzip, not rows)."""
    data = untrusted_dir.read_bytes(path.parent, path.name, MAX_BYTES)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            return [_row(json.loads(line)) for line in f if line.strip()]
    except (OSError, EOFError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None


def read_chunks(chunk_dir: Path) -> Samples:
    return Samples(tuple(row for f in _chunk_files(chunk_dir) for row in _read(f)))


def read_samples(out_dir: Path) -> tuple[Samples, bool]:
    """All samples and whether they come from a cleanly finished sampler."""
    if (out_dir / SAMPLES).is_file():
        return Samples(tuple(_read(out_dir / SAMPLES))), True
    return read_chunks(out_dir / CHUNKS), False


class EventLog:
    """Rare events (XID errors, lost GPUs, sampler errors) appended as JSON lines as they happen."""

    def __init__(self, out_dir: Path) -> None:
        self._lock = threading.Lock()
        # in a run folder, which the run's code can write: no link followed (mlrepro/core/untrusted_dir.py)
        self._f = os.fdopen(untrusted_dir.open_append(out_dir, EVENTS), "a", encoding="utf-8")

    def add(self, **event: Any) -> None:
        with self._lock:
            self._f.write(json.dumps(event, sort_keys=True, default=str) + "\n")
            self._f.flush()

    def close(self) -> None:
        with self._lock:
            self._f.close()


def read_events(out_dir: Path) -> list[dict[str, Any]]:
    path = out_dir / EVENTS
    if not path.is_file():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:  # the last line of a killed sampler may be cut short
            continue
    return events


def read_sidecar(out_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out_dir / SIDECAR).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def write_sidecar(out_dir: Path, sidecar: dict[str, Any]) -> None:
    atomic.write_json(out_dir / SIDECAR, sidecar)
