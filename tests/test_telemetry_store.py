"""The samples' stored format (mlrepro/telemetry/store.py): plain rows anyone can read, typed on the way in and out,
a file the run's code rewrote makes a partial summary; and a run's job imports neither pyarrow nor torch."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlrepro.core.untrusted_dir import PlantedLink
from mlrepro.telemetry import summarize
from mlrepro.telemetry.store import CHUNK_SUFFIX, COLUMNS, SAMPLES, SampleStore, read_samples, write_sidecar
from tests.conftest import REPO


def _store(out: Path, rows: list[dict[str, object]], flush_every: int = 0) -> int:
    store = SampleStore(out, flush_every_s=1e9)
    for i, row in enumerate(rows):
        store.add(row)
        if flush_every and i % flush_every == flush_every - 1:
            store.flush()  # several chunks, joined by finalize
    return store.finalize()


def test_samples_are_gzipped_json_rows_typed_by_column(tmp_path: Path) -> None:
    rows = [{"time_ms": 1000 + i, "tick": i, "device": "host", "host_cpu_pct": 50, "proc_rss_bytes": 2.0**20,
             "proc_cpu_pct": float("nan"), "not_a_column": "ignored"} for i in range(7)]
    assert _store(tmp_path, rows, flush_every=3) == 7
    # readable without mlrepro: one JSON object per line, every column, null where missing
    with gzip.open(tmp_path / SAMPLES, "rt") as f:
        plain = [json.loads(line) for line in f]
    assert [tuple(r) for r in plain] == [COLUMNS] * 7 and [r["tick"] for r in plain] == list(range(7))
    samples, complete = read_samples(tmp_path)
    assert complete and samples.num_rows == 7 and samples.devices() == {"host"}
    first = samples.rows[0]
    assert first["host_cpu_pct"] == 50.0 and isinstance(first["host_cpu_pct"], float)  # a float column
    assert first["proc_rss_bytes"] == 2**20 and isinstance(first["proc_rss_bytes"], int)  # an int column
    assert first["proc_cpu_pct"] is None and first["energy_mj"] is None  # NaN and absent: missing
    assert not (tmp_path / ".samples.chunks").exists()


@pytest.mark.parametrize("planted", [b"not gzip at all", gzip.compress(b'{"time_ms": 1, "tick": 0}\n'),
                                     gzip.compress(b'{"time_ms": 1, "tick": 0, "device": "host", '
                                                   b'"host_cpu_pct": "50"}\n'),
                                     gzip.compress(b'[1, 2, 3]\n'), gzip.compress(b'{"time_ms": 1')[:-4]])
def test_samples_the_runs_code_rewrote_make_a_partial_summary_naming_the_file(tmp_path: Path,
                                                                            planted: bytes) -> None:
    _store(tmp_path, [{"time_ms": 1000, "tick": 0, "device": "host", "host_cpu_pct": 5.0}])
    write_sidecar(tmp_path, {"status": "complete", "reasons": [], "config": {"host_backend": True}})
    (tmp_path / SAMPLES).write_bytes(planted)
    s = summarize(tmp_path, 0, 2000)
    assert s["partial"] and any(str(tmp_path / SAMPLES) in r for r in s["reasons"]), s["reasons"]


def test_a_chunk_the_runs_code_replaced_with_a_link_is_never_followed(tmp_path: Path) -> None:
    """The sampler joins only the chunks it wrote, read without following a link: a file of the user's that a link
    names never lands in the run folder (a container's code could read it there)."""
    secret = tmp_path / "secret"
    secret.write_bytes(gzip.compress(b"a file of the user's"))
    out = tmp_path / "telemetry"
    store = SampleStore(out, flush_every_s=1e9)
    store.add({"time_ms": 1, "tick": 0, "device": "host"})
    store.flush()
    chunk = out / ".samples.chunks" / f"000000{CHUNK_SUFFIX}"
    chunk.unlink()
    chunk.symlink_to(secret)
    with pytest.raises(PlantedLink, match="000000"):
        store.finalize()
    assert not (out / SAMPLES).exists()
    with pytest.raises(PlantedLink):  # nor does a reader of a killed sampler's chunks follow it
        read_samples(out)


def test_the_run_job_imports_neither_pyarrow_nor_torch() -> None:
    """What the run rule's job imports to drive a run, sample it and summarise it: no pyarrow (nor pandas), which is
    why the driver needs no warm parent (issue 46); no torch, which only the training imports."""
    code = ("import sys, mlrepro.jobs, mlrepro.runs.driver, mlrepro.telemetry, mlrepro.telemetry.sampler; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'pandas', 'torch')))")
    out = subprocess.run([sys.executable, "-P", "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
