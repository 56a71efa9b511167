"""BERT's preparation against what the real tools made of the same tiny inputs (fixtures/datasets/bert/,
made by make_fixtures.py with TensorFlow 2.20): the reference tokenizer's tokens, the reference
create_pretraining_data.py's samples, NVIDIA's hdf5_md5.py checksums of the HDF5 files NVIDIA's own scripts
made, and the tensors of NVIDIA's TF->PyTorch conversion read with tf.train.load_variable."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml

from mlrepro.datasets import bert, prepare, recipe, steps
from tests import dataset_sources as src

FIXTURES = src.BERT_FIXTURES


def _md5(sample: bert.Sample) -> str:
    """make_fixtures.py's digest of one unpadded sample."""
    return hashlib.md5(json.dumps([sample[0].tolist(), sample[1].tolist(), sample[2].tolist(), sample[3].tolist(),
                                   int(sample[4])]).encode()).hexdigest()


def _read_varlength(path: Path) -> list[bert.Sample]:
    with h5py.File(path, "r") as f:
        assert {k: f[k].dtype.metadata and f[k].dtype.metadata["vlen"] for k in f} == {
            "input_ids": np.int16, "segment_ids": np.int8, "masked_lm_positions": np.int16,
            "masked_lm_ids": np.int16, "next_sentence_labels": None}
        assert f["next_sentence_labels"].dtype == np.int8
        columns = [f[k][:] for k in ("input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                                     "next_sentence_labels")]
    return list(zip(*columns, strict=True))


def test_tokens_are_the_reference_tokenizers() -> None:
    tokenizer = bert.Tokenizer(bert.load_vocab(FIXTURES / "vocab.txt"))
    cases = json.loads((FIXTURES / "tokens.json").read_text())
    assert len(cases) > 10
    for line, expected in cases:
        assert tokenizer.tokenize(line) == expected, line


def test_samples_are_the_reference_scripts_sample_by_sample() -> None:
    vocab = bert.load_vocab(FIXTURES / "vocab.txt")
    expected = json.loads((FIXTURES / "reference_samples.json").read_text())
    assert sorted(expected) == ["eval.txt", *(f"part-{i:05d}-of-00500" for i in range(3))]
    for name, digests in expected.items():
        ours = [_md5(s) for s in bert.samples_from_text([FIXTURES / "results4" / name], vocab)]
        assert len(ours) == len(digests), name
        mismatch = next((i for i, (a, b) in enumerate(zip(ours, digests, strict=True)) if a != b), None)
        assert mismatch is None, f"{name}: sample {mismatch} differs from the reference's"


@pytest.mark.parametrize(("n_samples", "n_shards", "sizes"), [
    (280, 3, [93, 93, 93]),  # excess 2: every shard nominal-1, one sample dropped
    (12, 3, [3, 4, 4]),  # no excess: the first shard nominal-1, the last sample dropped
    (4320 * 36280 - 3947, 4320, [36279] * 4320)])
def test_shard_sizes_are_chop_hdf5_files(n_samples: int, n_shards: int, sizes: list[int]) -> None:
    assert bert.shard_sizes(n_samples, n_shards) == sizes


@pytest.mark.parametrize(("n_samples", "n_shards"), [(3, 3), (11, 6)])
def test_shard_counts_chop_hdf5_files_cannot_cut_are_refused(n_samples: int, n_shards: int) -> None:
    with pytest.raises(bert.BertDataError, match=f"cannot cut {n_samples} samples into {n_shards} shards"):
        bert.shard_sizes(n_samples, n_shards)


def _bert_recipe(server: src.Server, tmp: Path, files: dict[str, bytes]) -> recipe.Recipe:
    """The real recipe on the test's files, with the fixtures' 3-shard .chk as one more source."""
    path = src.recipe_for("bert", server, tmp, files, src.EXTRA["bert"])
    raw = yaml.safe_load(path.read_text())
    chk = "3_shards_varlength.chk"
    raw["sources"].append({"file": chk, "url": server.publish(f"bert/{chk}", files[chk]),
                           "hash": f"md5:{hashlib.md5(files[chk]).hexdigest()}"})
    path.write_text(yaml.safe_dump(raw))
    return recipe.load("bert", path)


def _prepare(r: recipe.Recipe, root: Path) -> Path:
    steps.download(r, root, root / "r" / "download.json", progressbar=False)
    steps.verify(r, root, root / "r" / "verify.json")
    steps.extract(r, root, root / "r" / "extract.json")
    steps.prepare_step(r, root, root / "r" / "prepare.json")
    return root / "prepared"


def test_recipe_makes_nvidias_hdf5_files(tmp_path: Path) -> None:
    files = {**src.bert(), "3_shards_varlength.chk": (FIXTURES / "3_shards_varlength.chk").read_bytes()}
    with src.serving() as server:
        prepared = _prepare(_bert_recipe(server, tmp_path, files), tmp_path / "root")
    # the .chk files were checked in the prepare step; the files they name are the ones there
    shards = prepared / "hdf5" / "training-3" / "hdf5_3_shards_varlength"
    for chk, folder in (("3_shards_varlength.chk", shards),
                        ("eval_varlength.chk", prepared / "hdf5" / "eval_varlength")):
        lines = (FIXTURES / chk).read_text().splitlines()
        assert lines == [f"{p.name}\t{bert.hdf5_md5(p)}" for p in sorted(folder.iterdir())]
    # the training shards hold the reference's samples of part 0, 1, 2 in order, less the one chop drops
    expected = json.loads((FIXTURES / "reference_samples.json").read_text())
    reference = [d for i in range(3) for d in expected[f"part-{i:05d}-of-00500"]]
    ours = [_md5(s) for p in sorted(shards.iterdir()) for s in _read_varlength(p)]
    assert ours == reference[:279] and len(reference) == 280
    # pick_eval_samples.py: 10,000 picks, sample int(i * n / 10000) of the reference's eval samples
    evals = [_md5(s) for s in _read_varlength(prepared / "hdf5" / "eval_varlength" / "part_eval_10k.hdf5")]
    assert evals == [expected["eval.txt"][int(i * 72 / 10000)] for i in range(10000)]


def test_a_wrong_chk_names_the_file_and_both_hashes(tmp_path: Path) -> None:
    files = {**src.bert(), "3_shards_varlength.chk": (FIXTURES / "3_shards_varlength.chk").read_text()
             .replace("\tc", "\t0", 1).encode()}
    with src.serving() as server, pytest.raises(prepare.PrepareError, match=(
            r"1 HDF5 file\(s\) differ from .*3_shards_varlength\.chk: part_00000_of_00003\.hdf5: "
            r"c4540248e5037d8a1eeedd417599de8d, 3_shards_varlength\.chk says 0")):
        _prepare(_bert_recipe(server, tmp_path, files), tmp_path / "root")
    assert not (tmp_path / "root" / "prepared").exists()


def test_checkpoint_is_nvidias_conversion(tmp_path: Path) -> None:
    out = tmp_path / "model.ckpt-28252.pt"
    bert.convert_tf_checkpoint(FIXTURES / "model.ckpt-28252", FIXTURES / "bert_config.json", out)
    saved = torch.load(out, map_location="cpu", weights_only=True)
    assert list(saved) == ["model"]
    state = saved["model"]
    expected = np.load(FIXTURES / "expected_state_dict.npz")
    assert sorted(state) == sorted(expected.files)
    assert len(state) == 5 + 2 * 16 + 2 + 8  # embeddings, 2 layers, pooler, heads
    for key in expected.files:
        assert state[key].dtype == torch.float32, key
        assert np.array_equal(state[key].numpy(), expected[key]), key
    vocab = json.loads((FIXTURES / "bert_config.json").read_text())["vocab_size"]
    assert vocab % 8 and state["bert.embeddings.word_embeddings.weight"].shape[0] == vocab + (-vocab) % 8
    # the decoder is the word embeddings (one tensor), as in BertForPretraining
    word = state["bert.embeddings.word_embeddings.weight"]
    assert state["cls.predictions.decoder.weight"].data_ptr() == word.data_ptr()
    assert list(state) == list(bert.state_dict_layout(json.loads((FIXTURES / "bert_config.json").read_text())))


def test_a_checkpoint_missing_a_parameter_is_refused() -> None:
    from mlrepro.datasets import tf_checkpoint

    config = json.loads((FIXTURES / "bert_config.json").read_text())
    variables = tf_checkpoint.read(FIXTURES / "model.ckpt-28252")
    del variables["bert/pooler/dense/bias"]
    with pytest.raises(bert.BertDataError, match=r"no variable for bert\.pooler\.dense\.bias"):
        bert.convert_checkpoint(variables, config)


def test_parts_made_in_parallel_give_the_same_shards(tmp_path: Path) -> None:
    bert.prepare_hdf5(FIXTURES / "results4", FIXTURES / "vocab.txt", tmp_path, 3, workers=2)
    bert.check_chk(tmp_path / "hdf5" / "training-3" / "hdf5_3_shards_varlength", FIXTURES / "3_shards_varlength.chk")
    assert sorted(p.name for p in (tmp_path / "hdf5").iterdir()) == ["eval_varlength", "training-3"]


def test_text_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    (tmp_path / "part-00000-of-00500").write_bytes(b"Fine line.\nBad \xff byte.\n")
    with pytest.raises(bert.BertDataError, match=r"part-00000-of-00500:2: not UTF-8 \(invalid start byte at byte 4\)"):
        bert.samples_from_text([tmp_path / "part-00000-of-00500"], bert.load_vocab(FIXTURES / "vocab.txt"))


def test_a_vocabulary_without_the_special_tokens_is_named(tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\nthe\n")
    with pytest.raises(bert.BertDataError, match=r"the vocabulary has no \[SEP\], \[MASK\]"):
        bert.samples_from_text([FIXTURES / "results4" / "eval.txt"], bert.load_vocab(tmp_path / "vocab.txt"))
