"""RNN-T's LibriSpeech recipe against NVIDIA's v1.1 preparation, on the test's tiny FLAC files.

The reference (mlcommons/training_results_v1.1, NVIDIA/benchmarks/rnnt/implementations/pytorch) converts with
SoX through pysox (utils/preprocessing_utils.py); here the real SoX (Debian's sox, installed by .ci/run) and
pysox 1.4.1 (NVIDIA's pin) convert the same FLAC files, and our WAV files and manifests must equal theirs.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlrepro.datasets.manifest import MANIFEST
from tests import dataset_sources as src
from tests.conftest import require
from tests.test_datasets import _run_recipe

SETS = ("dev-clean", "train-clean-100")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with src.serving() as server:
        _, folder = _run_recipe("rnnt", server, tmp_path_factory.mktemp("rnnt"))
    return folder


@pytest.fixture(scope="module")
def pysox() -> Any:
    require(shutil.which("sox") is not None,
            "SoX is missing (apt-get install sox; .ci/run installs Debian's sox, the reference's converter)")
    import sox

    return sox


def test_layout_of_the_three_mounts(prepared: Path) -> None:
    assert sorted(p.name for p in prepared.iterdir() if p.name != MANIFEST and not p.name.startswith(".")) == [
        "LibriSpeech", "metadata", "sentencepieces"]  # DATADIR's LibriSpeech/, METADATA_DIR, SENTENCEPIECES_DIR
    assert sorted(p.name for p in (prepared / "LibriSpeech").iterdir()) == sorted(
        [*SETS, *(f"{s}-wav" for s in SETS), *(f"librispeech-{s}-wav.json" for s in SETS)])
    assert sorted(p.name for p in (prepared / "metadata").iterdir()) == sorted(
        f"librispeech-{s}-wav-tokenized.pkl" for s in SETS)
    assert sorted(p.name for p in (prepared / "sentencepieces").iterdir()) == [
        "librispeech1023.model", "librispeech1023.vocab"]
    assert (prepared / "LibriSpeech" / "dev-clean" / "84" / "121123" / "84-121123-0002.flac").is_file()


def test_wav_and_manifest_equal_sox(prepared: Path, pysox: Any, tmp_path: Path) -> None:
    """preprocessing_utils.preprocess with speed [1] and target_sr None, run with the real SoX and pysox."""
    root = prepared / "LibriSpeech"
    for split in SETS:
        expected = []
        for trans in sorted((root / split).rglob("*.trans.txt")):
            rel = os.path.relpath(trans.parent, root / split)
            for line in trans.read_text().splitlines(keepends=True):
                fname, _, transcript = line.partition(" ")
                flac = str(trans.parent / f"{fname}.flac")
                wav = tmp_path / split / rel / f"{fname}.wav"
                wav.parent.mkdir(parents=True, exist_ok=True)
                pysox.Transformer().speed(factor=1).convert(pysox.file_info.sample_rate(flac)).build(flac, str(wav))
                assert (root / f"{split}-wav" / rel / wav.name).read_bytes() == wav.read_bytes(), wav.name
                info = pysox.file_info.info(str(wav))
                info["fname"] = os.path.join(f"{split}-wav", rel, wav.name)
                info["speed"] = 1
                expected.append({"transcript": transcript.lower().strip(), "files": [info],
                                 "original_duration": info["duration"], "original_num_samples": info["num_samples"]})
        assert (root / f"librispeech-{split}-wav.json").read_text() == json.dumps(expected, indent=2)
    dev = json.loads((root / "librispeech-dev-clean-wav.json").read_text())
    assert [f["silent"] for e in dev for f in e["files"]] == [False, True, False, True]


def test_sentencepieces_as_create_sentencepieces_sh(prepared: Path, tmp_path: Path) -> None:
    """The script's own trainer line on the script's input (jq -r '.[]["transcript"]' of the train-* manifests)
    makes the same model; it gives the transcripts back, with no <unk> (NVIDIA's Tokenizer asserts that)."""
    import sentencepiece

    lines = [e["transcript"] for m in sorted((prepared / "LibriSpeech").glob("librispeech-train-*-wav.json"))
             for e in json.loads(m.read_text())]
    (tmp_path / "txt.txt").write_text("".join(f"{t}\n" for t in lines))
    subprocess.run([sys.executable, "-c", "import sentencepiece as spm; spm.SentencePieceTrainer.train("
                    "input='txt.txt', model_prefix='librispeech1023', vocab_size=1023, character_coverage=1.0, "
                    "bos_id=-1, eos_id=-1, model_type='unigram')"], cwd=tmp_path, check=True, capture_output=True)
    vocab = (prepared / "sentencepieces" / "librispeech1023.vocab").read_text()
    assert vocab == (tmp_path / "librispeech1023.vocab").read_text()
    # the .model files differ only in the paths its trainer_spec records (input, model_prefix)
    model = sentencepiece.SentencePieceProcessor(model_file=str(prepared / "sentencepieces" / "librispeech1023.model"))
    reference = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "librispeech1023.model"))
    assert [(model.id_to_piece(i), model.get_score(i)) for i in range(len(model))] == [
        (reference.id_to_piece(i), reference.get_score(i)) for i in range(len(reference))]
    assert len(model) == 1023 and model.bos_id() == model.eos_id() == -1
    for split in SETS:
        for entry in json.loads((prepared / "LibriSpeech" / f"librispeech-{split}-wav.json").read_text()):
            ids = model.encode(entry["transcript"], out_type=int)
            assert 0 not in ids and model.decode(ids) == entry["transcript"]


def _parse_pkl(path: Path) -> tuple[dict[str, dict[str, Any]], dict[int, list[int]]]:
    """What NVIDIA's DALI sampler reads of a pickle (common/data/dali/sampler.py _parse_pkl)."""
    with open(path, "rb") as f:
        samples = pickle.load(f)
    files, transcripts = {}, {}
    for label, sample in enumerate(samples):
        transcripts[label] = sample["tokenized_transcript"]
        files[sample["fname"]] = {"label": label, "duration": sample["original_duration"]}
    return files, transcripts


def test_tokenized_pickles_as_tokenize_transcripts_py(prepared: Path) -> None:
    import sentencepiece

    model = sentencepiece.SentencePieceProcessor(model_file=str(prepared / "sentencepieces" / "librispeech1023.model"))
    for split in SETS:
        pkl = prepared / "metadata" / f"librispeech-{split}-wav-tokenized.pkl"
        assert pkl.read_bytes()[:2] == b"\x80\x04"  # protocol 4, the default of the image's Python 3.8
        with open(pkl, "rb") as f:
            samples = pickle.load(f)
        assert all(list(s) == ["fname", "original_duration", "tokenized_transcript"] for s in samples)
        manifest = json.loads((prepared / "LibriSpeech" / f"librispeech-{split}-wav.json").read_text())
        files, transcripts = _parse_pkl(pkl)
        assert list(files) == [e["files"][-1]["fname"] for e in manifest]
        assert [f["duration"] for f in files.values()] == [e["original_duration"] for e in manifest]
        assert [model.decode(t) for t in transcripts.values()] == [e["transcript"] for e in manifest]
        assert all(type(i) is int for t in transcripts.values() for i in t)
        assert all((prepared / "LibriSpeech" / name).is_file() for name in files)  # DATASET_DIR=/datasets/LibriSpeech


@pytest.mark.parametrize("length", [1, 3, 7, 40, 16001])
def test_sox_info_of_any_length(length: int, pysox: Any, tmp_path: Path) -> None:
    """soxi's -B rounding (3 significant figures, k/M suffixes) and -D's %f on the sizes that reach them."""
    import numpy as np
    import soundfile

    from mlrepro.datasets.librispeech import sox_info

    samples = (np.arange(length) % 200 - 100).astype(np.int16)
    wav = tmp_path / "x.wav"
    soundfile.write(str(wav), samples, 16000, format="WAV", subtype="PCM_16")
    assert sox_info(wav, samples, 16000) == pysox.file_info.info(str(wav))


def test_bad_input_is_named(tmp_path: Path) -> None:
    import numpy as np
    import soundfile

    from mlrepro.datasets import librispeech

    chapter = tmp_path / "LibriSpeech" / "train-clean-100" / "1" / "2"
    chapter.mkdir(parents=True)
    (chapter / "1-2.trans.txt").write_text("1-2-0000 A WORD\n")
    with pytest.raises(librispeech.LibriSpeechError, match=r"1-2\.trans\.txt: 1-2-0000 has no 1-2-0000\.flac"):
        librispeech.prepare(tmp_path / "LibriSpeech", tmp_path / "out", jobs=1)
    soundfile.write(str(chapter / "1-2-0000.flac"), np.zeros((10, 2), np.int16), 16000, subtype="PCM_16")
    with pytest.raises(librispeech.LibriSpeechError, match=r"1-2-0000\.flac: 2 channel\(s\), PCM_16; LibriSpeech is "
                                                           "16-bit mono"):
        librispeech.prepare(tmp_path / "LibriSpeech", tmp_path / "out", jobs=1)
    (chapter.parents[1]).rename(tmp_path / "LibriSpeech" / "dev-clean")
    with pytest.raises(librispeech.LibriSpeechError, match=r"LibriSpeech: no train-\* set; create_sentencepieces"):
        librispeech.prepare(tmp_path / "LibriSpeech", tmp_path / "out", jobs=1)
