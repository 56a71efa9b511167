"""Our pure-Python TensorFlow checkpoint reader against checkpoints written by real TensorFlow 2.20.

The fixtures and the values TensorFlow itself reads from them (tf.train.load_checkpoint(...).get_tensor, what
tf.train.load_variable uses) come from tests/fixtures/datasets/tf_checkpoint/make_fixtures.py.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from mlrepro.datasets import tf_checkpoint
from mlrepro.datasets.tf_checkpoint import CheckpointError

FIXTURES = Path(__file__).parent / "fixtures" / "datasets" / "tf_checkpoint"


def _expected(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / f"expected_{name}.npz") as npz:
        return {str(n): npz[f"v{i}"] for i, n in enumerate(npz["names"])}


def _assert_same(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    assert sorted(ours) == sorted(theirs)
    for name, want in theirs.items():
        got = ours[name]
        if want.dtype.kind == "S":  # string tensors: compare the bytes of each element
            assert got.dtype == object and got.shape == want.shape, name
            assert [bytes(x) for x in got.ravel()] == list(want.ravel()), name
            continue
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, want.dtype, got.shape)
        assert got.tobytes() == want.tobytes(), name  # bit for bit


def _copy(prefix: Path, dest: Path) -> Path:
    for f in prefix.parent.glob(prefix.name + ".*"):
        shutil.copy(f, dest / f.name)
    return dest / prefix.name


def test_crc32c_known_value_and_large_inputs() -> None:
    assert tf_checkpoint.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    data = os.urandom(50_000)
    bytewise = tf_checkpoint._raw_crc(0xFFFFFFFF, data) ^ 0xFFFFFFFF  # the plain table loop
    assert tf_checkpoint.crc32c(data) == bytewise  # the row-parallel path for large inputs
    assert tf_checkpoint.crc32c(data[20_000:], tf_checkpoint.crc32c(data[:20_000])) == bytewise


def test_tf1_saver_checkpoint_reads_as_tensorflow_reads_it() -> None:
    ours = tf_checkpoint.read(FIXTURES / "tf1" / "model")
    theirs = _expected("tf1")
    _assert_same(ours, theirs)
    kinds = {ours[n].dtype.name for n in ours}
    assert {"float32", "float64", "float16", "int64", "int32", "uint8", "bool", "object"} <= kinds
    assert ours["global_step"].shape == () and ours["global_step"] == 123456789012
    assert ours["bf16"].tolist() == [1.5, -2.25, 299008.0]  # 3e5 rounded to bfloat16, widened exactly


def test_tf2_object_checkpoint_reads_as_tensorflow_reads_it() -> None:
    ours = tf_checkpoint.read(FIXTURES / "tf2" / "ckpt-1")
    _assert_same(ours, _expected("tf2"))
    assert "_CHECKPOINTABLE_OBJECT_GRAPH" in ours and "w/.ATTRIBUTES/VARIABLE_VALUE" in ours


def test_index_of_several_blocks(tmp_path: Path) -> None:
    src = FIXTURES / "many"
    with gzip.open(src / "model.index.gz") as f:
        (tmp_path / "model.index").write_bytes(f.read())
    shutil.copy(src / "model.data-00000-of-00001", tmp_path)
    index = (tmp_path / "model.index").read_bytes()
    footer = index[-48:]
    _, _, pos = tf_checkpoint._handle(footer, 0, "footer")
    offset, size, _ = tf_checkpoint._handle(footer, pos, "footer")
    handles = tf_checkpoint._block_entries(tf_checkpoint._block(index, offset, size, tmp_path), tmp_path)
    assert len(handles) >= 2  # the fixture really spans several 256 KiB data blocks
    ours = tf_checkpoint.read(tmp_path / "model")
    with np.load(FIXTURES / "expected_many.npz") as npz:
        names, values = [str(n) for n in npz["names"]], npz["values"]
    assert sorted(ours) == names
    assert np.array_equal(np.stack([ours[n] for n in names]), values)


def test_corrupt_tensor_bytes_named(tmp_path: Path) -> None:
    prefix = _copy(FIXTURES / "tf1" / "model", tmp_path)
    data = tmp_path / "model.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0x01  # the last tensor written: the string tensor's bytes
    data.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"model\.data-00000-of-00001: checksum mismatch for tensor 'words'"):
        tf_checkpoint.read(prefix)
    raw[-1] ^= 0x01
    raw[0] ^= 0x80  # the first one
    data.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"checksum mismatch for tensor"):
        tf_checkpoint.read(prefix)


def test_corrupt_index_missing_data_and_not_a_checkpoint(tmp_path: Path) -> None:
    prefix = _copy(FIXTURES / "tf1" / "model", tmp_path)
    index = tmp_path / "model.index"
    good = index.read_bytes()
    index.write_bytes(good[:20] + bytes([good[20] ^ 0xFF]) + good[21:])
    with pytest.raises(CheckpointError, match=r"model\.index: checksum mismatch in the block"):
        tf_checkpoint.read(prefix)
    index.write_bytes(good)
    (tmp_path / "model.data-00000-of-00001").unlink()
    with pytest.raises(CheckpointError, match=r"cannot read data file .*model\.data-00000-of-00001"):
        tf_checkpoint.read(prefix)
    index.write_bytes(b"not a table" * 10)
    with pytest.raises(CheckpointError, match=r"model\.index: not a TensorFlow checkpoint index"):
        tf_checkpoint.read(prefix)
    with pytest.raises(CheckpointError, match=r"cannot read checkpoint index .*nothing\.index"):
        tf_checkpoint.read(tmp_path / "nothing")
