"""Bounded reading of untrusted files (mlrepro/core/safe_read.py): a clear UnsafeInput for every hostile entry,
never a hang, a MemoryError or a RecursionError."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlrepro.core import mllog_reader, safe_read

DEEP = 100_000


def test_regular_file_inside_root_is_read(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"x": [1, {"y": 2}]}')
    (tmp_path / "link.json").symlink_to("a.json")
    assert safe_read.read_json(tmp_path / "a.json", tmp_path) == {"x": [1, {"y": 2}]}
    assert safe_read.read_json(tmp_path / "link.json", tmp_path) == {"x": [1, {"y": 2}]}


def test_symlink_to_dev_zero_is_refused(tmp_path: Path) -> None:
    (tmp_path / "result.txt").symlink_to("/dev/zero")
    with pytest.raises(safe_read.UnsafeInput, match=r"result\.txt: a symlink out of .*-> /dev/zero"):
        safe_read.read_bytes(tmp_path / "result.txt", tmp_path)
    # without a root, what it leads to is judged: a character device is not read
    with pytest.raises(safe_read.UnsafeInput, match=r"result\.txt: not a regular file \(a character device\)"):
        safe_read.read_bytes(tmp_path / "result.txt")


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "result.txt")
    with pytest.raises(safe_read.UnsafeInput, match=r"result\.txt: not a regular file \(a FIFO\)"):
        safe_read.read_text(tmp_path / "result.txt", tmp_path)


def test_huge_sparse_file_is_refused_by_size(tmp_path: Path) -> None:
    big = tmp_path / "provenance.json"
    with big.open("wb") as f:
        f.truncate(3 << 30)  # 3 GiB, sparse: no disk used
    with pytest.raises(safe_read.UnsafeInput, match=r"provenance\.json: 3221225472 bytes, over the limit"):
        safe_read.read_json(big, tmp_path)


def test_json_nested_100000_deep_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * DEEP + "]" * DEEP)
    with pytest.raises(safe_read.UnsafeInput, match=r"deep\.json: JSON nested too deep"):
        safe_read.read_json(deep)
    # deeper than the limit yet within Python's recursion limit: refused by the depth check itself
    with pytest.raises(safe_read.UnsafeInput, match="nested deeper than 100 levels"):
        safe_read.loads_json("[" * 150 + "]" * 150, "x")
    assert safe_read.loads_json("[" * 100 + "]" * 100, "x") is not None


def test_invalid_json_and_bytes_name_the_source(tmp_path: Path) -> None:
    with pytest.raises(safe_read.UnsafeInput, match=r"^here: not valid JSON"):
        safe_read.loads_json("{", "here")
    (tmp_path / "latin1.json").write_bytes(b'"\xff"')
    with pytest.raises(safe_read.UnsafeInput, match=r"latin1\.json: not valid JSON"):
        safe_read.read_json(tmp_path / "latin1.json")


def test_mllog_line_nested_deep_is_a_value_error_naming_the_line(tmp_path: Path) -> None:
    log = tmp_path / "result_0.txt"
    log.write_text(':::MLLOG {"key": "seed", "value": 1}\n:::MLLOG {"key": "x", "value": ' + "[" * DEEP + "]" * DEEP
                   + "}\n")
    with pytest.raises(ValueError, match=r"result_0\.txt, line 2: JSON nested too deep"):
        list(mllog_reader.events(log))
    log.write_text(":::MLLOG [1, 2]\n")
    with pytest.raises(ValueError, match=r"line 1: an MLLOG event is a JSON object, not list"):
        list(mllog_reader.events(log))
