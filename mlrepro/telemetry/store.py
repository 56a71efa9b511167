"""The sampler's files, written so that a killed sampler never leaves one that looks complete.

Samples go out every few seconds as small Parquet chunks under ``.samples.chunks/`` (each written
under a temporary name and renamed); only a clean stop merges them into ``samples.parquet``. The
sidecar says ``"status": "complete"`` only after that merge, so a sampler killed mid-run leaves
chunks (still readable, marked partial) and a sidecar that says it was still running.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mlrepro.core import atomic, untrusted_dir
from mlrepro.telemetry.backend import GPU_FIELDS
from mlrepro.telemetry.host import HOST_FIELDS

SAMPLES = "samples.parquet"
CHUNKS = ".samples.chunks"
SIDECAR = "telemetry.json"
EVENTS = "events.jsonl"
SUMMARY = "summary.json"
LOG = "sampler.log"
# A run over several nodes: the batch host's sampler writes the files above into the telemetry folder, the
# other nodes' samplers theirs into NODES_DIR/<host>/, and NODES lists the nodes expected and how each started.
NODES = "nodes.json"
NODES_DIR = "nodes"
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
SCHEMA = pa.schema(
    [
        pa.field("time_ms", pa.int64(), nullable=False),  # time.time_ns() // 1e6: mllog's clock
        pa.field("tick", pa.int64(), nullable=False),  # deadline index; gaps are overruns
        pa.field("device", pa.string(), nullable=False),  # "host" or a GPU UUID
        *(pa.field(f, pa.float64() if f in _FLOAT else pa.int64()) for f in (*GPU_FIELDS, *HOST_FIELDS)),
    ]
)
_INT_COLUMNS = [f.name for f in SCHEMA if f.type == pa.int64()]


def _coerce(row: dict[str, Any]) -> dict[str, Any]:
    # a replayed or odd driver value may be a float in an integer column
    for k in _INT_COLUMNS:
        v = row.get(k)
        if v is not None and not isinstance(v, int):
            row[k] = int(v)
    return row


class SampleStore:
    def __init__(self, out_dir: Path, flush_every_s: float = 5.0) -> None:
        self.out_dir = out_dir
        self.chunk_dir = out_dir / CHUNKS
        self.chunk_dir.mkdir(parents=True, exist_ok=True)
        self.flush_every_s = flush_every_s
        self.rows: list[dict[str, Any]] = []
        self.chunks = 0
        self.total_rows = 0
        self._last_flush = time.monotonic()

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(_coerce(row))
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self.rows:
            return
        table = pa.Table.from_pylist(self.rows, schema=SCHEMA)
        with atomic.atomic_path(self.chunk_dir / f"{self.chunks:06d}.parquet") as tmp:
            pq.write_table(table, tmp)
        self.chunks += 1
        self.total_rows += len(self.rows)
        self.rows = []

    def finalize(self) -> int:
        """Merge the chunks into samples.parquet; return the number of rows."""
        self.flush()
        table = read_chunks(self.chunk_dir)
        with atomic.atomic_path(self.out_dir / SAMPLES) as tmp:
            pq.write_table(table, tmp)
        shutil.rmtree(self.chunk_dir, ignore_errors=True)
        return table.num_rows


def _read(path: Path) -> pa.Table:
    # ParquetFile, not pq.read_table: read_table imports pyarrow.dataset and with it pandas (0.5 s a run)
    return pq.ParquetFile(path).read().cast(SCHEMA)


def read_chunks(chunk_dir: Path) -> pa.Table:
    files = sorted(chunk_dir.glob("*.parquet")) if chunk_dir.is_dir() else []
    tables = [_read(f) for f in files]
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def read_samples(out_dir: Path) -> tuple[pa.Table, bool]:
    """All samples and whether they come from a cleanly finished sampler."""
    if (out_dir / SAMPLES).is_file():
        return _read(out_dir / SAMPLES), True
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
