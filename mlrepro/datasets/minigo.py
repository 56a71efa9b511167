"""MiniGo's frozen target model, `target.minigo.tf`, in pure Python (no TensorFlow).

NVIDIA's v1.1 README (mlcommons/training_results_v1.1:NVIDIA/benchmarks/minigo/implementations/tensorflow/
README.md) freezes the downloaded target with `freeze_graph.py --flagfile=ml_perf/flags/19/architecture.flags
--model_path=ml_perf/target/target` and renames `target.minigo` to `target.minigo.tf`. dual_net.freeze_graph
builds the PREDICT graph, restores the checkpoint and calls tf.graph_util.convert_variables_to_constants(sess,
graph_def, ['policy_output', 'value_output']): every variable the two outputs need becomes a Const holding its
checkpoint value, every other node is pruned. minigo_model.write_graph_def then wraps the GraphDef: `<minigo>`,
uint64 version 1, file size and metadata size, the metadata as compact sorted JSON (dual_net.make_model_metadata),
the GraphDef bytes. It writes `.evalfp32minigo`, `.stagedmodel` and `.minigo`, identical without TensorRT.

Here the graph comes from `target.meta` (its MetaGraphDef), decoded with a minimal protobuf reader. Freezing is
only right when that graph is the inference graph (`pos_tensor` fed, batch norms in inference mode): a training
graph (an Estimator's checkpoint) is refused with a clear error, since the reference rebuilds the graph from code.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from mlrepro.datasets import tf_checkpoint
from mlrepro.datasets.tf_checkpoint import CheckpointError, _fields

__all__ = ["CheckpointError", "FreezeError", "freeze", "minigo_model", "read_minigo_model", "write_target"]

OUTPUT_NAMES = ("policy_output", "value_output")  # dual_net.freeze_graph
INPUT_NAME = "pos_tensor"  # dual_net.get_inference_input
# dual_net.make_model_metadata under ml_perf/flags/19/architecture.flags (the other flags at their defaults).
ARCHITECTURE_19 = {"conv_width": 64, "fc_width": 64, "trunk_layers": 6, "use_SE": False, "use_SE_bias": False,
                   "use_swish": False, "input_features": "mlperf07", "input_layout": "nchw", "input_type": "bool",
                   "board_size": 19}
_VARIABLE_OPS = {"VariableV2", "Variable"}
_SHAPE_ATTR = "_output_shapes"  # shape hints export_meta_graph adds; a graph built afresh has none
# types.proto: the dtypes our checkpoint reader returns as numpy, and numpy back to the proto's number
_DTYPE_NUMBERS = {np.dtype("<f4"): 1, np.dtype("<f8"): 2, np.dtype("<i4"): 3, np.dtype("u1"): 4,
                  np.dtype("<i2"): 5, np.dtype("i1"): 6, np.dtype("<i8"): 9, np.dtype("?"): 10,
                  np.dtype("<u2"): 17, np.dtype("<f2"): 19, np.dtype("<u4"): 22, np.dtype("<u8"): 23}


class FreezeError(ValueError):
    """The target model cannot be frozen as the reference freezes it."""


def _tag(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return _encode_varint(number << 3) + _encode_varint(value)


class Node:
    """A NodeDef, its fields kept as the bytes they came in (so unchanged nodes are re-emitted unchanged)."""

    def __init__(self, raw: bytes, where: str) -> None:
        self.fields = _fields(raw, where)
        self.name = self._text(1)
        self.op = self._text(2)
        self.inputs = [bytes(v).decode() for n, v in self.fields if n == 3 and isinstance(v, bytes)]
        self.attrs: dict[str, bytes] = {}
        for number, value in self.fields:
            if number == 5 and isinstance(value, bytes):
                entry = dict(_fields(value, where))
                key, attr = entry.get(1, b""), entry.get(2, b"")
                assert isinstance(key, bytes) and isinstance(attr, bytes)
                self.attrs[key.decode()] = attr

    def _text(self, number: int) -> str:
        value = next((v for n, v in self.fields if n == number), b"")
        assert isinstance(value, bytes)
        return value.decode()

    def attr_field(self, key: str, number: int) -> int | bytes | None:
        return next((v for n, v in _fields(self.attrs.get(key, b""), self.name) if n == number), None)

    def encode(self) -> bytes:
        out = []
        for number, value in self.fields:
            if number == 5 and isinstance(value, bytes):
                key = dict(_fields(value, self.name)).get(1)
                if key == _SHAPE_ATTR.encode():
                    continue
            assert isinstance(value, bytes), f"{self.name}: NodeDef field {number} is not length-delimited"
            out.append(_tag(number, value))
        return b"".join(out)


def _tensor_values(value: np.ndarray) -> bytes:
    """TensorProto's values as tensor_util.make_tensor_proto stores them: the raw bytes (tensor_content) for
    more than one element of a numeric type, otherwise the packed repeated field of the dtype."""
    flat = np.ascontiguousarray(value).ravel()
    if flat.size > 1 and flat.dtype != np.bool_:
        return _tag(4, flat.tobytes())
    if flat.size == 0:
        return b""
    kind = flat.dtype
    if kind == np.float32:
        return _tag(5, flat.astype("<f4").tobytes())  # float_val
    if kind == np.float64:
        return _tag(6, flat.astype("<f8").tobytes())  # double_val
    if kind == np.float16:  # half_val: the bits as varints
        return _tag(13, b"".join(_encode_varint(int(v)) for v in flat.view("<u2")))
    number = {np.dtype("<i8"): 10, np.dtype("?"): 11, np.dtype("<u4"): 16, np.dtype("<u8"): 17}.get(kind, 7)
    return _tag(number, b"".join(_encode_varint(int(v) & 0xFFFFFFFFFFFFFFFF) for v in flat))


def _const(name: str, value: np.ndarray) -> bytes:
    """The Const NodeDef convert_variables_to_constants writes: attrs dtype and value (a TensorProto)."""
    dtype = _DTYPE_NUMBERS.get(value.dtype)
    if dtype is None:
        raise FreezeError(f"variable {name!r}: dtype {value.dtype} cannot be frozen")
    shape = b"".join(_tag(2, _varint_field(1, d)) for d in value.shape)
    tensor = _varint_field(1, dtype) + _tag(2, shape) + _tensor_values(value)
    attrs = [("dtype", _varint_field(6, dtype)), ("value", _tag(8, tensor))]
    return (_tag(1, name.encode()) + _tag(2, b"Const")
            + b"".join(_tag(5, _tag(1, k.encode()) + _tag(2, v)) for k, v in attrs))


def _source(name: str) -> str:
    return name.lstrip("^").split(":")[0]


def freeze(meta: Path, checkpoint: Path) -> bytes:
    """The GraphDef of `meta`'s graph pruned to OUTPUT_NAMES, its variables replaced by the checkpoint's values."""
    try:
        raw = meta.read_bytes()
    except OSError as exc:
        raise FreezeError(f"cannot read {meta}: {exc.strerror or exc}") from exc
    graph = next((v for n, v in _fields(raw, str(meta)) if n == 2), None)  # MetaGraphDef.graph_def
    if not isinstance(graph, bytes):
        raise FreezeError(f"{meta}: no graph_def in this MetaGraphDef")
    graph_fields = _fields(graph, f"{meta}: graph_def")
    nodes = [Node(v, f"{meta}: node") for n, v in graph_fields if n == 1 and isinstance(v, bytes)]
    by_name = {node.name: node for node in nodes}
    missing = [name for name in OUTPUT_NAMES if name not in by_name]
    if missing:
        raise FreezeError(f"{meta}: the graph has no node {', '.join(missing)} (the outputs dual_net freezes)")
    needed: set[str] = set()
    todo = list(OUTPUT_NAMES)
    while todo:  # graph_util.extract_sub_graph: everything the outputs reach through data and control inputs
        name = todo.pop()
        if name in needed:
            continue
        if name not in by_name:
            raise FreezeError(f"{meta}: node {name!r} is an input but not in the graph")
        needed.add(name)
        todo.extend(_source(i) for i in by_name[name].inputs)
    kept = [node for node in nodes if node.name in needed]
    _check_inference_graph(kept, meta)
    values = tf_checkpoint.read(checkpoint)
    out = []
    for node in kept:
        if node.op in _VARIABLE_OPS:
            if node.name not in values:
                raise FreezeError(f"{checkpoint}: no tensor {node.name!r} for the variable of that name in {meta}")
            out.append(_tag(1, _const(node.name, values[node.name])))
        elif node.op in {"VarHandleOp", "ReadVariableOp"}:
            raise FreezeError(f"{meta}: node {node.name!r} is a resource variable ({node.op}); only TF1 variables "
                              "(VariableV2, as MiniGo's TF 1.x graphs use) are frozen here")
        else:
            out.append(_tag(1, node.encode()))
    # convert_variables_to_constants copies the library (2, empty without functions) and the versions (4)
    for number in (2, 4):
        value = next((v for n, v in graph_fields if n == number), b"")
        assert isinstance(value, bytes)
        out.append(_tag(number, value))
    return b"".join(out)


def _check_inference_graph(kept: list[Node], meta: Path) -> None:
    sources = {node.name for node in kept if node.op == "Placeholder"}
    if sources != {INPUT_NAME}:
        raise FreezeError(f"{meta}: the outputs are fed by {sorted(sources) or 'no placeholder'}, not by "
                          f"{INPUT_NAME!r} alone: this is not MiniGo's inference graph (a training graph?); freeze "
                          "it with the implementation's freeze_graph.py (the recipe's prepare.image) instead")
    for node in kept:
        if node.op.startswith("FusedBatchNorm") and node.attr_field("is_training", 5) == 1:
            raise FreezeError(f"{meta}: {node.name} normalises with batch statistics (is_training): a training "
                              "graph; freeze it with the implementation's freeze_graph.py (prepare.image) instead")


def minigo_model(graph_def: bytes, metadata: dict[str, object]) -> bytes:
    """minigo_model.write_model_bytes: the `<minigo>` header, the metadata JSON, the serialized model."""
    meta = json.dumps(metadata, sort_keys=True, separators=(",", ":")).encode()
    return b"<minigo>" + struct.pack("<QQQ", 1, 32 + len(meta) + len(graph_def), len(meta)) + meta + graph_def


def read_minigo_model(data: bytes, where: str) -> tuple[dict[str, object], bytes]:
    """minigo_model.read_model: (metadata, GraphDef bytes), checking the header."""
    if data[:8] != b"<minigo>" or len(data) < 32:
        raise FreezeError(f"{where}: not a Minigo model file (no <minigo> header)")
    version, size, meta_size = struct.unpack("<QQQ", data[8:32])
    if version != 1 or size != len(data):
        raise FreezeError(f"{where}: version {version}, size {size} (file has {len(data)} bytes)")
    return json.loads(data[32:32 + meta_size]), data[32 + meta_size:]


def write_target(target: Path, metadata: dict[str, object] | None = None) -> Path:
    """Freeze `target` (`target.meta` + its checkpoint) next to it as freeze_graph.py and NVIDIA's README do."""
    model = minigo_model(freeze(target.with_name(target.name + ".meta"), target),
                         {"engine": "tf", "use_trt": False, **(metadata or ARCHITECTURE_19)})
    names = [".evalfp32minigo", ".stagedmodel", ".minigo.tf"]  # .minigo renamed to .minigo.tf (README)
    for suffix in names:
        tmp = target.with_name(f"{target.name}{suffix}.tmp{os.getpid()}")
        tmp.write_bytes(model)
        tmp.replace(target.with_name(target.name + suffix))
    return target.with_name(target.name + ".minigo.tf")

