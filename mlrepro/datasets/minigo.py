"""MiniGo's frozen target model, `target.minigo.tf`, in pure Python (no TensorFlow).

NVIDIA's v1.1 README (mlcommons/training_results_v1.1:NVIDIA/benchmarks/minigo/implementations/tensorflow/
README.md) freezes the downloaded target with `freeze_graph.py --flagfile=ml_perf/flags/19/architecture.flags
--model_path=ml_perf/target/target` and renames `target.minigo` to `target.minigo.tf`. dual_net.freeze_graph
(same folder, minigo/dual_net.py) does not use `target.meta`: DualNetwork REBUILDS the graph from code
(get_inference_input's `pos_tensor`, model_inference_fn with training=False under the architecture flags),
restores the checkpoint's values and calls tf.graph_util.convert_variables_to_constants(sess, graph_def,
['policy_output', 'value_output']): every variable the two outputs need becomes a Const holding its checkpoint
value, every other node (labels, losses, optimizer) is pruned. minigo_model.write_graph_def then wraps the
GraphDef: `<minigo>`, uint64 version 1, file size and metadata size, the metadata as compact sorted JSON
(dual_net.make_model_metadata), the GraphDef bytes. It writes `.evalfp32minigo`, `.stagedmodel` and `.minigo`,
identical without TensorRT.

Here that frozen GraphDef is written node for node as TensorFlow 1.15 (NVIDIA's 21.09-tf1 image) emits it for
tf.layers' names, ops and attributes, with the weights read from the checkpoint (tf_checkpoint.read); `target.meta`
is not read. tests/test_dataset_minigo.py compares it with TensorFlow 2.20's freezing of dual_net's own code and
names each difference between 2.20 and 1.15.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from mlrepro.core.errors import MlreproError
from mlrepro.datasets import tf_checkpoint
from mlrepro.datasets.tf_checkpoint import CheckpointError

__all__ = ["ARCHITECTURE_19", "CheckpointError", "FreezeError", "inference_graph", "minigo_model",
           "read_minigo_model", "write_target"]

# dual_net.make_model_metadata under ml_perf/flags/19/architecture.flags (conv_width 64, fc_width 64,
# trunk_layers 6, bool_features, mlperf07 features, nchw); the other flags at dual_net's defaults.
ARCHITECTURE_19 = {"conv_width": 64, "fc_width": 64, "trunk_layers": 6, "use_SE": False, "use_SE_bias": False,
                   "use_swish": False, "input_features": "mlperf07", "input_layout": "nchw", "input_type": "bool",
                   "board_size": 19}
PLANES = {"mlperf07": 13, "agz": 17}  # features.MLPERF07_FEATURES_PLANES, AGZ_FEATURES_PLANES
POLICY_CONV_WIDTH, VALUE_CONV_WIDTH = 2, 1  # dual_net's flag defaults, not set by architecture.flags
# model_inference_fn's mg_batchn asks for 1e-5; TF 1.15's nn.fused_batch_norm raises it to cuDNN's minimum
# ("min_epsilon = 1.001e-5", tensorflow/python/ops/nn_impl.py at r1.15; later TF 2.x dropped that)
BN_EPSILON = 1.001e-5
# GraphDef.versions.producer: TF_GRAPH_DEF_VERSION of TensorFlow 1.15, the producer graphs written by 1.15 carry
# (the reference's image); loaders refuse only a producer below their minimum (0).
GRAPH_DEF_PRODUCER = 134
_FLOAT, _INT32, _BOOL = 1, 3, 10  # types.proto DataType
_LAYOUT = "NCHW"  # architecture.flags' input_layout nchw: tf.layers' channels_first


class FreezeError(MlreproError, ValueError):
    """The target model cannot be frozen as the reference freezes it."""


def _encode_varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # negative int32/int64 as protobuf writes them: ten bytes, two's complement
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def _varint_field(number: int, value: int) -> bytes:
    return _encode_varint(number << 3) + _encode_varint(value)


# AttrValue (attr_value.proto): list 1 (ListValue: s 2, i 3), s 2, f 4, b 5, type 6, shape 7, tensor 8
def _type(dtype: int) -> bytes:
    return _varint_field(6, dtype)


def _bool(value: bool) -> bytes:
    return _varint_field(5, int(value))


def _text(value: str) -> bytes:
    return _tag(2, value.encode())


def _float(value: float) -> bytes:
    return _encode_varint(4 << 3 | 5) + struct.pack("<f", value)


def _ints(values: list[int]) -> bytes:
    return _tag(1, _tag(3, b"".join(_encode_varint(v) for v in values)) if values else b"")


def _shape(dims: tuple[int, ...]) -> bytes:
    return b"".join(_tag(2, _varint_field(1, d)) for d in dims)  # TensorShapeProto.dim: Dim.size


def _tensor(value: np.ndarray, shape: tuple[int, ...]) -> bytes:
    """TensorProto as tensor_util.make_tensor_proto stores it: the raw bytes (tensor_content) for more than one
    value, otherwise the value in the packed field of its dtype (float_val 5, int_val 7), broadcast to `shape`."""
    dtype = {np.dtype("<f4"): _FLOAT, np.dtype("<i4"): _INT32}[value.dtype]
    flat = np.ascontiguousarray(value).ravel()
    if flat.size > 1:
        values = _tag(4, flat.tobytes())
    elif dtype == _FLOAT:
        values = _tag(5, flat.tobytes())
    else:
        values = _tag(7, _encode_varint(int(flat[0])))
    return _varint_field(1, dtype) + _tag(2, _shape(shape)) + values


class _Graph:
    """The frozen GraphDef, node by node in the order model_inference_fn creates them (extract_sub_graph keeps
    the graph's order), with TensorFlow's name uniquification of ops made at the top level (Relu, Relu_1...)."""

    def __init__(self, values: dict[str, np.ndarray], where: str) -> None:
        self.values, self.where = values, where
        self.nodes: list[bytes] = []
        self.counts: dict[str, int] = {}

    def unique(self, name: str) -> str:
        count = self.counts.get(name, 0)
        self.counts[name] = count + 1
        return name if count == 0 else f"{name}_{count}"

    def node(self, name: str, op: str, inputs: list[str], attrs: dict[str, bytes]) -> str:
        self.nodes.append(_tag(1, _tag(1, name.encode()) + _tag(2, op.encode())
                          + b"".join(_tag(3, i.encode()) for i in inputs)
                          + b"".join(_tag(5, _tag(1, k.encode()) + _tag(2, attrs[k])) for k in sorted(attrs))))
        return name

    def const(self, name: str, value: np.ndarray, shape: tuple[int, ...]) -> str:
        dtype = _FLOAT if value.dtype == np.float32 else _INT32
        return self.node(name, "Const", [], {"dtype": _type(dtype), "value": _tag(8, _tensor(value, shape))})

    def variable(self, name: str, shape: tuple[int, ...]) -> str:
        """A variable as convert_variables_to_constants leaves it: a Const of the checkpoint's value, read
        through the `<name>/read` Identity that tf.Variable made (colocated with the variable: `_class`)."""
        value = self.values.get(name)
        if value is None:
            raise FreezeError(f"{self.where}: no tensor {name!r}, which dual_net's model_inference_fn reads")
        if value.dtype != np.float32 or value.shape != shape:
            raise FreezeError(f"{self.where}: tensor {name!r} is {value.dtype}{list(value.shape)}, the architecture "
                              f"needs float32{list(shape)} (set the architecture flags the target was trained with)")
        self.const(name, value.astype("<f4"), shape)
        return self.node(f"{name}/read", "Identity", [name],
                         {"T": _type(_FLOAT), "_class": _tag(1, _tag(2, f"loc:@{name}".encode()))})

    def relu(self, x: str) -> str:
        return self.node(self.unique("Relu"), "Relu", [x], {"T": _type(_FLOAT)})

    def conv(self, x: str, channels: int, filters: int, size: int) -> str:
        scope = self.unique("conv2d")  # tf.layers.conv2d(use_bias=False, padding='same')
        kernel = self.variable(f"{scope}/kernel", (size, size, channels, filters))
        return self.node(f"{scope}/Conv2D", "Conv2D", [x, kernel], {
            "T": _type(_FLOAT), "data_format": _text(_LAYOUT), "dilations": _ints([1, 1, 1, 1]),
            "explicit_paddings": _ints([]), "padding": _text("SAME"), "strides": _ints([1, 1, 1, 1]),
            "use_cudnn_on_gpu": _bool(True)})

    def batchn(self, x: str, channels: int, center_scale: bool = True) -> str:
        """tf.layers.batch_normalization(fused=True, training=False): FusedBatchNormV3 on the moving statistics.
        Without center and scale, TF 1.15's BatchNormalization.build makes gamma's constant 1 (Const), then beta's
        0 (Const_1), before the moving statistics (tensorflow/python/keras/layers/normalization.py at r1.15)."""
        scope = self.unique("batch_normalization")
        if center_scale:
            gamma = self.variable(f"{scope}/gamma", (channels,))
            beta = self.variable(f"{scope}/beta", (channels,))
        else:
            gamma = self.const(f"{scope}/Const", np.ones(1, "<f4"), (channels,))
            beta = self.const(f"{scope}/Const_1", np.zeros(1, "<f4"), (channels,))
        mean = self.variable(f"{scope}/moving_mean", (channels,))
        variance = self.variable(f"{scope}/moving_variance", (channels,))
        return self.node(f"{scope}/FusedBatchNormV3", "FusedBatchNormV3", [x, gamma, beta, mean, variance], {
            "T": _type(_FLOAT), "U": _type(_FLOAT), "data_format": _text(_LAYOUT),
            "epsilon": _float(BN_EPSILON), "is_training": _bool(False)})

    def reshape(self, x: str, shape: list[int]) -> str:
        name = self.unique("Reshape")
        target = self.const(f"{name}/shape", np.array(shape, "<i4"), (len(shape),))
        return self.node(name, "Reshape", [x, target], {"T": _type(_FLOAT), "Tshape": _type(_INT32)})

    def dense(self, x: str, inputs: int, units: int) -> str:
        scope = self.unique("dense")
        kernel = self.variable(f"{scope}/kernel", (inputs, units))
        bias = self.variable(f"{scope}/bias", (units,))
        matmul = self.node(f"{scope}/MatMul", "MatMul", [x, kernel], {
            "T": _type(_FLOAT), "transpose_a": _bool(False), "transpose_b": _bool(False)})
        return self.node(f"{scope}/BiasAdd", "BiasAdd", [matmul, bias],
                         {"T": _type(_FLOAT), "data_format": _text("NHWC")})


def _int(architecture: dict[str, object], key: str, where: str) -> int:
    value = architecture.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise FreezeError(f"{where}: architecture flag {key} must be a positive integer, not {value!r}")
    return value


def inference_graph(values: dict[str, np.ndarray], architecture: dict[str, object], where: str) -> bytes:
    """The GraphDef dual_net.freeze_graph writes: get_inference_input and model_inference_fn(training=False)
    (mlcommons/training_results_v1.1:NVIDIA/benchmarks/minigo/implementations/tensorflow/minigo/dual_net.py),
    pruned to `policy_output` and `value_output` (only model_inference_fn's nodes remain), the variables frozen
    to `values` (the checkpoint's tensors by name)."""
    unsupported = {k: architecture.get(k) for k in ("use_SE", "use_SE_bias", "use_swish") if architecture.get(k)}
    if architecture.get("input_layout") != "nchw" or architecture.get("input_type") != "bool" or unsupported \
            or architecture.get("input_features") not in PLANES:
        raise FreezeError(f"{where}: only the layout of ml_perf/flags/19/architecture.flags (bool mlperf07/agz "
                          f"features, nchw, no squeeze-excitation or swish) is built here, not {architecture}")
    n, width = _int(architecture, "board_size", where), _int(architecture, "conv_width", where)
    planes = PLANES[str(architecture["input_features"])]
    g = _Graph(values, where)
    features = g.node("pos_tensor", "Placeholder", [], {"dtype": _type(_BOOL), "shape": _tag(7, _shape(
        (-1, planes, n, n)))})
    x = g.node("Cast", "Cast", [features], {"DstT": _type(_FLOAT), "SrcT": _type(_BOOL), "Truncate": _bool(False)})
    shared = g.relu(g.batchn(g.conv(x, planes, width, 3), width))
    for _ in range(_int(architecture, "trunk_layers", where)):
        inner = g.relu(g.batchn(g.conv(shared, width, width, 3), width))
        inner = g.batchn(g.conv(inner, width, width, 3), width)
        shared = g.relu(g.node(g.unique("add"), "AddV2", [shared, inner], {"T": _type(_FLOAT)}))
    policy = g.relu(g.batchn(g.conv(shared, width, POLICY_CONV_WIDTH, 1), POLICY_CONV_WIDTH,
                             center_scale=False))
    policy = g.reshape(policy, [-1, POLICY_CONV_WIDTH * n * n])
    g.node("policy_output", "Softmax", [g.dense(policy, POLICY_CONV_WIDTH * n * n, n * n + 1)], {"T": _type(_FLOAT)})
    value = g.relu(g.batchn(g.conv(shared, width, VALUE_CONV_WIDTH, 1), VALUE_CONV_WIDTH,
                            center_scale=False))
    fc_width = _int(architecture, "fc_width", where)
    value = g.relu(g.dense(g.reshape(value, [-1, VALUE_CONV_WIDTH * n * n]), VALUE_CONV_WIDTH * n * n, fc_width))
    value = g.reshape(g.dense(value, fc_width, 1), [-1])
    g.node("value_output", "Tanh", [value], {"T": _type(_FLOAT)})
    # convert_variables_to_constants copies the (empty) function library and the versions
    return b"".join(g.nodes) + _tag(2, b"") + _tag(4, _varint_field(1, GRAPH_DEF_PRODUCER))


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


def write_target(target: Path, architecture: dict[str, object] | None = None) -> Path:
    """Freeze the checkpoint `target` next to it as freeze_graph.py and NVIDIA's README do (target.meta, the
    graph the checkpoint was saved with, is not read: the reference rebuilds the inference graph from code)."""
    architecture = architecture or ARCHITECTURE_19
    graph = inference_graph(tf_checkpoint.read(target), architecture, str(target))
    model = minigo_model(graph, {"engine": "tf", "use_trt": False, **architecture})
    names = [".evalfp32minigo", ".stagedmodel", ".minigo.tf"]  # .minigo renamed to .minigo.tf (README)
    for suffix in names:
        tmp = target.with_name(f"{target.name}{suffix}.tmp{os.getpid()}")
        tmp.write_bytes(model)
        tmp.replace(target.with_name(target.name + suffix))
    return target.with_name(target.name + ".minigo.tf")
