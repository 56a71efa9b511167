"""MiniGo's target.minigo.tf built in pure Python against TensorFlow's own freezing of the reference's graph.

tests/fixtures/datasets/minigo/make_fixtures.py ran dual_net.py's get_inference_input and model_inference_fn
(training=False) under real TensorFlow with a tiny architecture, saved the variables with a TF1 Saver (the
Estimator's names) and froze the graph with tf.compat.v1.graph_util.convert_variables_to_constants, as
dual_net.freeze_graph does. Ours is built from the checkpoint alone and compared node by node.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mlrepro.datasets import minigo, prepare, recipe, tf_checkpoint
from mlrepro.datasets.minigo import FreezeError
from mlrepro.datasets.tf_checkpoint import _fields

FIXTURES = Path(__file__).parent / "fixtures" / "datasets" / "minigo"
TINY = {**minigo.ARCHITECTURE_19, "conv_width": 8, "fc_width": 8, "trunk_layers": 2, "board_size": 9}
Node = tuple[str, str, list[str], dict[str, bytes]]  # name, op, inputs, {attr: AttrValue bytes}
# Attributes TensorFlow 2.20 writes that the TF 1.15 of NVIDIA's image (nvcr.io/nvidia/tensorflow:21.09-tf1-py3)
# does not know, each at the default value that 2.20 fills in when it reads a graph without it. Ours leaves them
# out, since a 1.15 loader refuses a NodeDef naming an attr its op lacks ("NodeDef mentions attr
# 'exponential_avg_factor' not in Op<name=FusedBatchNormV3...>", tensorflow/tensorflow#41391):
# FusedBatchNormV3.exponential_avg_factor (TF 2.2, 2020; used only when is_training), MatMul.grad_a/grad_b (2023,
# TF 2.12/2.13; hints for gradient matmuls).
FALSE = b"\x28\x00"  # AttrValue b: false


def _f(value: float) -> bytes:
    return b"\x25" + struct.pack("<f", value)  # AttrValue f


TF220_ONLY = {"FusedBatchNormV3": {"exponential_avg_factor": _f(1.0)}, "MatMul": {"grad_a": FALSE, "grad_b": FALSE}}


def _as_tf115(nodes: list[Node]) -> tuple[list[Node], Counter[str]]:
    """TensorFlow 2.20's freezing of dual_net's code turned, rule by rule, into what TF 1.15 writes for it (the
    rules applied are counted, so that none is silently a no-op or more than it should be):
    - attrs: TF220_ONLY dropped, each checked at its default value;
    - epsilon: 2.20 keeps mg_batchn's 1e-5; 1.15's nn.fused_batch_norm raises it to 1.001e-5 (nn_impl.py r1.15,
      "min_epsilon = 1.001e-5", as in DeepRec-AI/DeepRec, a TF 1.15 fork);
    - a batch norm without center and scale: tf-keras 2.20 makes beta's 0 (Const) then gamma's 1 (Const_1) when
      called, after the moving statistics; TF 1.15's BatchNormalization.build makes gamma's 1 (Const) then beta's
      0 (Const_1) before them (tensorflow/python/keras/layers/normalization.py r1.15)."""
    counts: Counter[str] = Counter()
    swap: dict[str, str] = {}
    for name, op, inputs, _ in nodes:
        if op == "FusedBatchNormV3" and inputs[1].endswith("/Const_1"):  # gamma is tf-keras' Const_1
            scope = name.rpartition("/")[0]
            swap.update({f"{scope}/Const": f"{scope}/Const_1", f"{scope}/Const_1": f"{scope}/Const"})
            counts["constants swapped"] += 1
    out: list[Node] = []
    for name, op, inputs, attrs in nodes:
        dropped = TF220_ONLY.get(op, {})
        assert {k: v for k, v in attrs.items() if k in dropped} == dropped, name
        attrs = {k: v for k, v in attrs.items() if k not in dropped}
        counts["attrs dropped"] += len(dropped)
        if op == "FusedBatchNormV3":
            assert attrs["epsilon"] == _f(1e-5), name
            attrs["epsilon"] = _f(1.001e-5)
            counts["epsilon"] += 1
        out.append((swap.get(name, name), op, [swap.get(i, i) for i in inputs], attrs))
    for scope in {n.rpartition("/")[0] for n in swap}:  # the two constants go before the moving mean
        consts = sorted((n for n in out if n[0] in (f"{scope}/Const", f"{scope}/Const_1")), key=lambda n: n[0])
        out = [n for n in out if n not in consts]
        at = next(i for i, n in enumerate(out) if n[0] == f"{scope}/moving_mean")
        out[at:at] = consts
    return out, counts


def _nodes(raw: bytes) -> tuple[list[Node], dict[int, bytes]]:
    """A GraphDef's nodes as (name, op, inputs, {attr: AttrValue bytes}), and its other fields."""
    nodes, rest = [], {}
    for number, value in _fields(raw, "graph"):
        assert isinstance(value, bytes)
        if number != 1:
            rest[number] = value
            continue
        fields = _fields(value, "node")
        text = [bytes(v).decode() for n, v in fields if n in (1, 2, 3) and isinstance(v, bytes)]
        attrs = {}
        for n, v in fields:
            if n == 5 and isinstance(v, bytes):
                key, attr = (dict(_fields(v, "attr")).get(i) for i in (1, 2))
                assert isinstance(key, bytes) and isinstance(attr, bytes)
                attrs[key.decode()] = attr
        assert {n for n, _ in fields} <= {1, 2, 3, 5}, "a NodeDef field we do not compare (device?)"
        nodes.append((text[0], text[1], text[2:], attrs))
    return nodes, rest


def _tensor(node: Node) -> dict[int, int | bytes]:
    """A Const's TensorProto fields (4: tensor_content, 5: float_val)."""
    value = dict(_fields(node[3]["value"], "attr"))[8]
    assert isinstance(value, bytes)
    return dict(_fields(value, "tensor"))


def _target(tmp_path: Path) -> Path:
    for f in (FIXTURES / "target").iterdir():
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / "target"


def test_inference_graph_matches_tensorflow_node_by_node() -> None:
    values = tf_checkpoint.read(FIXTURES / "target" / "target")
    ours, our_rest = _nodes(minigo.inference_graph(values, TINY, "target"))
    theirs, their_rest = _nodes((FIXTURES / "frozen.pb").read_bytes())
    expected, counts = _as_tf115(theirs)
    # 7 batch norms (1 + 2 per block + 2 heads), 2 of them without center and scale; 3 dense layers
    assert counts == {"attrs dropped": 7 + 3 * 2, "epsilon": 7, "constants swapped": 2}
    assert [n[0] for n in ours] == [n[0] for n in expected]  # same nodes, in the same order
    for (name, op, inputs, attrs), (_, their_op, their_inputs, their_attrs) in zip(ours, expected, strict=True):
        assert (op, inputs) == (their_op, their_inputs), name
        assert attrs == their_attrs, name  # attr values byte for byte, Const tensors included
    gamma = next(n for n in ours if n[0] == "batch_normalization_5/FusedBatchNormV3")[2][1]
    assert _tensor(next(n for n in ours if n[0] == gamma))[5] == struct.pack("<f", 1.0)  # float_val: 1
    # the function library (empty) alike; versions: only the producer, ours TF 1.15's, theirs 2.20's
    assert our_rest[2] == their_rest[2] == b"" and set(our_rest) == set(their_rest) == {2, 4}
    assert _fields(our_rest[4], "versions") == [(1, minigo.GRAPH_DEF_PRODUCER)]
    assert [n for n, _ in _fields(their_rest[4], "versions")] == [1]
    ops = {n[1] for n in theirs}
    assert {"Placeholder", "Cast", "Conv2D", "FusedBatchNormV3", "AddV2", "MatMul", "Softmax", "Tanh"} <= ops
    assert "global_step" in values and "global_step" not in {n[0] for n in ours}  # pruned: not an input
    # a frozen variable holds the checkpoint's value: tensor_content, the raw little-endian bytes
    assert _tensor(next(n for n in ours if n[0] == "conv2d/kernel"))[4] == values["conv2d/kernel"].tobytes()


def test_full_size_architecture_builds() -> None:
    """ARCHITECTURE_19's graph from a checkpoint of its shapes (zeros): 13 planes on 19x19, 6 residual blocks."""
    shapes = {"conv2d/kernel": (3, 3, 13, 64), "dense/kernel": (2 * 361, 362), "dense/bias": (362,),
              "dense_1/kernel": (361, 64), "dense_1/bias": (64,), "dense_2/kernel": (64, 1), "dense_2/bias": (1,)}
    values = {f"conv2d_{i}/kernel": np.zeros((3, 3, 64, 64), "<f4") for i in range(1, 13)}
    values.update({f"conv2d_{i}/kernel": np.zeros((1, 1, 64, w), "<f4") for i, w in ((13, 2), (14, 1))})
    values.update({k: np.zeros(s, "<f4") for k, s in shapes.items()})
    for i, width in [*((i, 64) for i in range(13)), (13, 2), (14, 1)]:
        for stat in ("gamma", "beta", "moving_mean", "moving_variance"):
            values[f"batch_normalization_{i}/{stat}".replace("_0/", "/")] = np.zeros(width, "<f4")
    nodes, _ = _nodes(minigo.inference_graph(values, minigo.ARCHITECTURE_19, "target"))
    theirs, _ = _nodes((FIXTURES / "frozen.pb").read_bytes())
    assert theirs[0][3]["shape"].endswith(b"\x12\x02\x08\x0d\x12\x02\x08\x09\x12\x02\x08\x09")  # [?, 13, 9, 9]
    assert nodes[0][3]["shape"] == theirs[0][3]["shape"].replace(b"\x08\x09", b"\x08\x13")  # [?, 13, 19, 19]
    assert sum(n[1] == "Conv2D" for n in nodes) == 15 and sum(n[1] == "AddV2" for n in nodes) == 6
    assert [n[0] for n in nodes[-3:]] == ["Reshape_2/shape", "Reshape_2", "value_output"]


def test_target_minigo_tf_as_freeze_graph_writes_it(tmp_path: Path) -> None:
    path = minigo.write_target(_target(tmp_path), TINY)
    data = path.read_bytes()
    assert path.name == "target.minigo.tf"
    assert (tmp_path / "target.evalfp32minigo").read_bytes() == data == (tmp_path / "target.stagedmodel").read_bytes()
    metadata, graph = minigo.read_minigo_model(data, str(path))
    assert metadata == {"engine": "tf", "use_trt": False, **TINY}
    assert graph == minigo.inference_graph(tf_checkpoint.read(tmp_path / "target"), TINY, "target")
    assert int.from_bytes(data[16:24], "little") == len(data)
    # dual_net.make_model_metadata with ml_perf/flags/19/architecture.flags, written as compact sorted JSON
    text = ('{"board_size":19,"conv_width":64,"engine":"tf","fc_width":64,"input_features":"mlperf07",'
            '"input_layout":"nchw","input_type":"bool","trunk_layers":6,"use_SE":false,"use_SE_bias":false,'
            '"use_swish":false,"use_trt":false}')
    model = minigo.minigo_model(b"graph", {"engine": "tf", "use_trt": False, **minigo.ARCHITECTURE_19})
    assert json.loads(text) and model[32:] == text.encode() + b"graph"
    assert struct.unpack("<QQQ", model[8:32]) == (1, len(model), len(text))


def test_wrong_architecture_and_bad_files_refused(tmp_path: Path) -> None:
    target = _target(tmp_path)
    with pytest.raises(FreezeError, match=r"target: tensor 'conv2d/kernel' is float32\[3, 3, 13, 8\], the "
                                          r"architecture needs float32\[3, 3, 13, 64\]"):
        minigo.write_target(target)  # the tiny checkpoint against architecture.flags' widths
    values = tf_checkpoint.read(target)
    del values["batch_normalization_1/moving_variance"]
    with pytest.raises(FreezeError, match=r"^ckpt: no tensor 'batch_normalization_1/moving_variance', which dual_n"):
        minigo.inference_graph(values, TINY, "ckpt")
    with pytest.raises(FreezeError, match=r"only the layout of ml_perf/flags/19/architecture\.flags"):
        minigo.write_target(target, {**TINY, "input_layout": "nhwc"})
    with pytest.raises(FreezeError, match=r"architecture flag fc_width must be a positive integer, not '8'"):
        minigo.write_target(target, {**TINY, "fc_width": "8"})
    (tmp_path / "target.index").write_bytes(b"truncated")
    with pytest.raises(tf_checkpoint.CheckpointError, match=r"target\.index: not a TensorFlow checkpoint index"):
        minigo.write_target(target, TINY)
    assert not list(tmp_path.glob("*minigo*"))  # nothing that looks finished


def test_preparer_takes_the_recipes_architecture(tmp_path: Path) -> None:
    downloads, extracted = tmp_path / "downloads", tmp_path / "extracted"
    downloads.mkdir()
    _target(downloads)
    (extracted / "checkpoints" / "mlperf07").mkdir(parents=True)
    (extracted / "checkpoints" / "mlperf07" / "model.ckpt-1.index").write_bytes(b"index")

    def run(architecture: object, out: Path) -> None:
        r = recipe.Recipe("minigo", tmp_path / "dataset.yaml", "MiniGo", "/data", [], [],
                          {"python": "minigo", "architecture": architecture})
        prepare.run(r, extracted, downloads, out)

    run({"conv_width": 8, "fc_width": 8, "trunk_layers": 2, "board_size": 9}, tmp_path / "out")
    metadata, _ = minigo.read_minigo_model((tmp_path / "out" / "target" / "target.minigo.tf").read_bytes(), "model")
    assert metadata == {"engine": "tf", "use_trt": False, **TINY}
    assert (tmp_path / "out" / "mlperf07" / "model.ckpt-1.index").read_bytes() == b"index"
    with pytest.raises(prepare.PrepareError, match=r"minigo: prepare\.architecture: unknown trunk; known: conv_wi"):
        run({"trunk": 2}, tmp_path / "bad")
    with pytest.raises(prepare.PrepareError, match=r"minigo: .*target: tensor 'conv2d/kernel' is float32\[3, 3, 13, 8"):
        run(None, tmp_path / "default")  # architecture.flags' widths: not the tiny checkpoint's
