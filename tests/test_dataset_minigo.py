"""MiniGo's target.minigo.tf frozen in pure Python against TensorFlow's own freezing of the same model.

tests/fixtures/datasets/minigo/make_fixtures.py saved a tiny MiniGo-shaped model (dual_net's names) with a TF1
Saver and froze it with tf.compat.v1.graph_util.convert_variables_to_constants, as dual_net.freeze_graph does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlrepro.datasets import minigo, tf_checkpoint
from mlrepro.datasets.minigo import FreezeError, Node
from mlrepro.datasets.tf_checkpoint import _fields

FIXTURES = Path(__file__).parent / "fixtures" / "datasets" / "minigo"


def _graph(raw: bytes) -> tuple[list[Node], list[tuple[int, int | bytes]]]:
    fields = _fields(raw, "graph")
    return [Node(v, "node") for n, v in fields if n == 1 and isinstance(v, bytes)], [f for f in fields if f[0] != 1]


def _target(tmp_path: Path) -> Path:
    for f in (FIXTURES / "target").iterdir():
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / "target"


def test_freeze_matches_tensorflow_node_by_node() -> None:
    ours, our_rest = _graph(minigo.freeze(FIXTURES / "target" / "target.meta", FIXTURES / "target" / "target"))
    theirs, their_rest = _graph((FIXTURES / "frozen.pb").read_bytes())
    assert [n.name for n in ours] == [n.name for n in theirs]  # same nodes kept, in the same order
    for a, b in zip(ours, theirs, strict=True):
        assert (a.op, a.inputs) == (b.op, b.inputs), a.name
        assert a.attrs == b.attrs, a.name  # attr values byte for byte, Const tensors included
    assert our_rest == their_rest  # library and versions
    ops = {n.op for n in theirs}
    assert {"Placeholder", "Conv2D", "FusedBatchNormV3", "MatMul", "Softmax", "Tanh"} <= ops
    assert not ops & {"VariableV2", "AssignAdd", "SoftmaxCrossEntropyWithLogits"}  # frozen; training ops pruned
    # a Const's value is the checkpoint's: tensor_content holds the raw little-endian bytes
    kernel = next(n for n in ours if n.name == "conv2d/kernel")
    tensor = dict(_fields(dict(_fields(kernel.attrs["value"], "attr"))[8], "tensor"))
    ckpt = tf_checkpoint.read(FIXTURES / "target" / "target")
    assert tensor[4] == ckpt["conv2d/kernel"].tobytes()


def test_target_minigo_tf_as_freeze_graph_writes_it(tmp_path: Path) -> None:
    path = minigo.write_target(_target(tmp_path))
    data = path.read_bytes()
    assert path.name == "target.minigo.tf"
    assert (tmp_path / "target.evalfp32minigo").read_bytes() == data == (tmp_path / "target.stagedmodel").read_bytes()
    metadata, graph = minigo.read_minigo_model(data, str(path))
    assert graph == minigo.freeze(tmp_path / "target.meta", tmp_path / "target")
    # dual_net.make_model_metadata with ml_perf/flags/19/architecture.flags, written as compact sorted JSON
    text = ('{"board_size":19,"conv_width":64,"engine":"tf","fc_width":64,"input_features":"mlperf07",'
            '"input_layout":"nchw","input_type":"bool","trunk_layers":6,"use_SE":false,"use_SE_bias":false,'
            '"use_swish":false,"use_trt":false}')
    assert metadata == json.loads(text) and data[32:32 + len(text)] == text.encode()
    assert int.from_bytes(data[16:24], "little") == len(data) and int.from_bytes(data[24:32], "little") == len(text)


def test_training_graph_and_bad_files_refused(tmp_path: Path) -> None:
    target = _target(tmp_path)
    meta = tmp_path / "target.meta"
    good = meta.read_bytes()
    meta.write_bytes(good.replace(b"pos_tensor", b"iterator_0"))  # fed by something else than pos_tensor
    with pytest.raises(FreezeError, match=r"target\.meta: the outputs are fed by \['iterator_0'\].*freeze_graph"):
        minigo.write_target(target)
    meta.write_bytes(good.replace(b"value_output", b"value_outpuX"))
    with pytest.raises(FreezeError, match=r"target\.meta: the graph has no node value_output"):
        minigo.write_target(target)
    meta.write_bytes(good)
    (tmp_path / "target.index").write_bytes(b"truncated")
    with pytest.raises(tf_checkpoint.CheckpointError, match=r"target\.index: not a TensorFlow checkpoint index"):
        minigo.write_target(target)
    assert not list(tmp_path.glob("*minigo*"))  # nothing that looks finished
