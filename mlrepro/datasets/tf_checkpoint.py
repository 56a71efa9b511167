"""Read a TensorFlow checkpoint (the tensor-bundle `V2` format of TF1's Saver and TF2's Checkpoint) without TF.

A checkpoint `<prefix>` is `<prefix>.index`, a LevelDB-format table (SSTable) mapping each tensor name to a
`BundleEntryProto` (dtype, shape, shard, offset, size, masked crc32c), with the `BundleHeaderProto` under the
empty key, and `<prefix>.data-0000N-of-0000M`, the raw tensor bytes. Formats followed:
tensorflow/tensorflow:tensorflow/core/util/tensor_bundle/tensor_bundle.{cc,proto} (string tensors: varint64
lengths, a masked crc32c of the lengths, then the bytes), tensorflow/core/lib/io/{format,block}.cc (the table's
blocks, 5-byte trailers and 48-byte footer) and tensorflow/core/framework/types.proto (dtype numbers).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlrepro.core.errors import MlreproError

__all__ = ["CheckpointError", "crc32c", "read"]

_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_SIZE = 48
_MASK_DELTA = 0xA282EAD8
_DT_STRING = 7
_DT_BFLOAT16 = 14
# types.proto's numbers of the dtypes numpy holds natively (bfloat16 is widened to float32, exactly).
_DTYPES = {1: "<f4", 2: "<f8", 3: "<i4", 4: "u1", 5: "<i2", 6: "i1", 8: "<c8", 9: "<i8", 10: "?",
           17: "<u2", 18: "<c16", 19: "<f2", 22: "<u4", 23: "<u8"}


class CheckpointError(MlreproError, ValueError):
    """A checkpoint file is missing, corrupt or uses a feature this reader does not support."""


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1).astype(np.uint32)
    return table


_TABLE = _crc_table()
_TABLE_LIST = [int(x) for x in _TABLE]


def _raw_crc(state: int, data: bytes) -> int:
    table = _TABLE_LIST
    for byte in data:
        state = table[(state ^ byte) & 0xFF] ^ (state >> 8)
    return state


def crc32c(data: bytes | memoryview, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of `data`, extending `crc` (like TF's crc32c::Extend).

    Large inputs are cut into equal rows hashed side by side with numpy (the register is linear over GF(2)), then
    the rows' registers are chained with a precomputed "advance by one row of zeros" map.
    """
    data = bytes(data)
    state = crc ^ 0xFFFFFFFF
    if len(data) < 4096:
        return _raw_crc(state, data) ^ 0xFFFFFFFF
    # Folding the initial register into the first 4 bytes makes the register start at 0, so that leading zero
    # padding changes nothing.
    head = (int.from_bytes(data[:4], "little") ^ state).to_bytes(4, "little")
    buf = np.frombuffer(head + data[4:], dtype=np.uint8)
    row = int(np.sqrt(buf.size)) + 1
    rows = -(-buf.size // row)
    padded = np.zeros(rows * row, dtype=np.uint8)
    padded[padded.size - buf.size:] = buf
    block = padded.reshape(rows, row)
    regs = np.zeros(rows, dtype=np.uint32)
    for j in range(row):
        regs = _TABLE[(regs ^ block[:, j]) & 0xFF] ^ (regs >> 8)
    # advance[k][v]: register (v << 8k) after `row` zero bytes.
    advance = (np.arange(256, dtype=np.uint32)[None, :] << (8 * np.arange(4, dtype=np.uint32))[:, None]).ravel()
    for _ in range(row):
        advance = _TABLE[advance & 0xFF] ^ (advance >> 8)
    adv = [[int(x) for x in part] for part in advance.reshape(4, 256)]
    total = 0
    for reg in regs.tolist():
        total = (adv[0][total & 0xFF] ^ adv[1][(total >> 8) & 0xFF] ^ adv[2][(total >> 16) & 0xFF]
                 ^ adv[3][total >> 24] ^ reg)
    return total ^ 0xFFFFFFFF


def _unmask(masked: int) -> int:
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CheckpointError(f"{where}: truncated or malformed varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes, where: str) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of a protobuf message: ints for varint/fixed, bytes for length-delimited."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos, where)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, where)
            out.append((number, value))
        elif wire == 1:
            out.append((number, int.from_bytes(buf[pos:pos + 8], "little")))
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos, where)
            out.append((number, buf[pos:pos + length]))
            pos += length
        elif wire == 5:
            out.append((number, int.from_bytes(buf[pos:pos + 4], "little")))
            pos += 4
        else:
            raise CheckpointError(f"{where}: unsupported protobuf wire type {wire}")
        if pos > len(buf):
            raise CheckpointError(f"{where}: truncated protobuf message")
    return out


def _block(index: bytes, offset: int, size: int, path: Path) -> bytes:
    """One table block, its trailer's masked crc32c verified; compressed blocks are refused."""
    end = offset + size
    if end + 5 > len(index):
        raise CheckpointError(f"{path}: block at offset {offset} runs past the end of the file")
    contents, kind = index[offset:end], index[end]
    expected = _unmask(int.from_bytes(index[end + 1:end + 5], "little"))
    if crc32c(index[offset:end + 1]) != expected:
        raise CheckpointError(f"{path}: checksum mismatch in the block at offset {offset}")
    if kind != 0:
        raise CheckpointError(f"{path}: block at offset {offset} is compressed (type {kind}); only uncompressed "
                              "tables (TensorFlow's default) are supported")
    return contents


def _block_entries(block: bytes, path: Path) -> list[tuple[bytes, bytes]]:
    where = f"{path}: table block"
    if len(block) < 4:
        raise CheckpointError(f"{where} too short")
    restarts = int.from_bytes(block[-4:], "little")
    limit = len(block) - 4 - 4 * restarts
    if limit < 0:
        raise CheckpointError(f"{where} has a bad restart count {restarts}")
    entries: list[tuple[bytes, bytes]] = []
    key = b""
    pos = 0
    while pos < limit:
        shared, pos = _varint(block, pos, where)
        unshared, pos = _varint(block, pos, where)
        value_len, pos = _varint(block, pos, where)
        if shared > len(key) or pos + unshared + value_len > limit:
            raise CheckpointError(f"{where}: corrupt entry at offset {pos}")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        entries.append((key, block[pos:pos + value_len]))
        pos += value_len
    return entries


def _handle(buf: bytes, pos: int, where: str) -> tuple[int, int, int]:
    offset, pos = _varint(buf, pos, where)
    size, pos = _varint(buf, pos, where)
    return offset, size, pos


def _table(path: Path) -> list[tuple[bytes, bytes]]:
    """All (key, value) pairs of a LevelDB-format table, in key order."""
    try:
        index = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint index {path}: {exc.strerror or exc}") from exc
    if len(index) < _FOOTER_SIZE or int.from_bytes(index[-8:], "little") != _TABLE_MAGIC:
        raise CheckpointError(f"{path}: not a TensorFlow checkpoint index (no table magic number at its end)")
    footer = index[-_FOOTER_SIZE:]
    _, _, pos = _handle(footer, 0, f"{path}: footer")  # the metaindex block (empty in TF's tables)
    index_offset, index_size, _ = _handle(footer, pos, f"{path}: footer")
    entries: list[tuple[bytes, bytes]] = []
    for _, handle in _block_entries(_block(index, index_offset, index_size, path), path):
        offset, size, _ = _handle(handle, 0, f"{path}: index block")
        entries.extend(_block_entries(_block(index, offset, size, path), path))
    return entries


def _shape(proto: bytes, where: str) -> tuple[int, ...]:
    dims: list[int] = []
    for number, value in _fields(proto, where):
        if number == 2 and isinstance(value, bytes):
            size = next((v for n, v in _fields(value, where) if n == 1), 0)
            assert isinstance(size, int)
            dims.append(size - (1 << 64) if size >= 1 << 63 else size)
        elif number == 3 and value:
            raise CheckpointError(f"{where}: tensor of unknown rank")
    return tuple(dims)


def _strings(raw: bytes, count: int, where: str) -> tuple[np.ndarray, int]:
    """A string tensor's elements and its crc32c as TF computes it: over the lengths packed as uint32 (uint64
    past 4 GiB), then the 4 stored bytes of their masked checksum, then the strings' bytes."""
    lengths: list[int] = []
    pos = 0
    for _ in range(count):
        length, pos = _varint(raw, pos, where)
        lengths.append(length)
    packed = b"".join(n.to_bytes(4 if n <= 0xFFFFFFFF else 8, "little") for n in lengths)
    crc = crc32c(packed)
    if crc != _unmask(int.from_bytes(raw[pos:pos + 4], "little")):
        raise CheckpointError(f"{where}: checksum mismatch in the string lengths")
    crc = crc32c(raw[pos:], crc)
    pos += 4
    out = np.empty(count, dtype=object)
    for i, length in enumerate(lengths):
        out[i] = raw[pos:pos + length]
        pos += length
    if pos != len(raw):
        raise CheckpointError(f"{where}: string tensor holds {len(raw)} bytes, its lengths sum to {pos}")
    return out, crc


def read(prefix: Path) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint `prefix` (the path without `.index`), by name, each crc32c-verified.

    String tensors come back as object arrays of bytes, bfloat16 ones widened to float32 (exactly).
    """
    prefix = Path(prefix)
    index_path = prefix.with_name(prefix.name + ".index")
    entries = _table(index_path)
    if not entries or entries[0][0] != b"":
        raise CheckpointError(f"{index_path}: no bundle header (the entry with the empty key)")
    header = dict(_fields(entries[0][1], f"{index_path}: header"))
    num_shards = header.get(1, 1)
    if header.get(2, 0) != 0:
        raise CheckpointError(f"{index_path}: big-endian checkpoints are not supported")
    assert isinstance(num_shards, int)
    shards: dict[int, bytes] = {}
    tensors: dict[str, np.ndarray] = {}
    for key, value in entries[1:]:
        name = key.decode("utf-8", "replace")
        where = f"{index_path}: tensor {name!r}"
        dtype = shape = None
        shard = offset = size = expected_crc = 0
        for number, field in _fields(value, where):
            if number == 1:
                dtype = field
            elif number == 2 and isinstance(field, bytes):
                shape = _shape(field, where)
            elif number == 3:
                shard = field
            elif number == 4:
                offset = field
            elif number == 5:
                size = field
            elif number == 6:
                expected_crc = field
            elif number == 7:
                raise CheckpointError(f"{where} is saved in slices (a partitioned variable); not supported")
        assert isinstance(shard, int) and isinstance(offset, int) and isinstance(size, int)
        assert isinstance(expected_crc, int)
        shape = shape or ()
        if not 0 <= shard < num_shards:
            raise CheckpointError(f"{where}: shard {shard} out of range 0..{num_shards - 1}")
        if shard not in shards:
            data_path = prefix.with_name(f"{prefix.name}.data-{shard:05d}-of-{num_shards:05d}")
            try:
                shards[shard] = data_path.read_bytes()
            except OSError as exc:
                raise CheckpointError(f"{where}: cannot read data file {data_path}: {exc.strerror or exc}") from exc
        data_path = prefix.with_name(f"{prefix.name}.data-{shard:05d}-of-{num_shards:05d}")
        raw = shards[shard][offset:offset + size]
        if len(raw) != size:
            raise CheckpointError(f"{data_path}: tensor {name!r} at offset {offset} (+{size} bytes) runs past the "
                                  f"end of the file ({len(shards[shard])} bytes)")
        count = int(np.prod(shape, dtype=np.int64))
        if dtype == _DT_STRING and size:
            array, crc = _strings(raw, count, f"{data_path}: tensor {name!r}")
        else:
            crc = crc32c(raw)
        if size and crc != _unmask(expected_crc):
            raise CheckpointError(f"{data_path}: checksum mismatch for tensor {name!r} (offset {offset}, "
                                  f"{size} bytes)")
        if dtype == _DT_STRING:
            array = array if size else np.empty(0, dtype=object)
        elif dtype == _DT_BFLOAT16:
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in _DTYPES:
            array = np.frombuffer(raw, dtype=_DTYPES[dtype]).copy()
        else:
            raise CheckpointError(f"{where}: dtype number {dtype} (tensorflow/core/framework/types.proto) is not "
                                  "supported")
        if array.size != count:
            raise CheckpointError(f"{data_path}: tensor {name!r} has {array.size} elements, its shape {shape} "
                                  f"needs {count}")
        tensors[name] = array.reshape(shape)
    return tensors
