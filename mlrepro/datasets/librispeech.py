"""RNN-T: LibriSpeech laid out as NVIDIA's v1.1 PyTorch RNN-T mounts it, in the project's own Python.

NVIDIA's preparation (mlcommons/training_results_v1.1, NVIDIA/benchmarks/rnnt/implementations/pytorch) is
``scripts/preprocess_librispeech.sh``: ``utils/convert_librispeech.py`` + ``utils/preprocessing_utils.py``
per set (sox: FLAC -> WAV at the input rate, speed 1, and pysox's ``file_info.info`` of each WAV into
``librispeech-<set>-wav.json``), then ``scripts/create_sentencepieces.sh`` (a unigram sentencepiece model of the
train-* transcripts) and ``scripts/tokenize_transcripts.py`` (``<json name>-tokenized.pkl``). This module does
the same without sox; the tests compare its WAV files and manifest fields with the real sox's.

Layout under the prepared folder (the recipe mounts it at /datasets):
``LibriSpeech/`` (DATADIR's LibriSpeech/), ``metadata/`` (METADATA_DIR), ``sentencepieces/`` (SENTENCEPIECES_DIR).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import tempfile
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from mlrepro.core.errors import MlreproError

# preprocess_librispeech.sh converts these sets, in this order
SETS = ("train-clean-100", "train-clean-360", "train-other-500", "dev-clean", "dev-other", "test-clean",
        "test-other")
# create_sentencepieces.sh: model_prefix librispeech1023, vocab_size 1023
SENTENCEPIECE_NAME = "librispeech1023"
SENTENCEPIECE_VOCAB = 1023
PICKLE_PROTOCOL = 4  # pickle's default under the image's Python 3.8 (tokenize_transcripts.py: pickle.dump)


class LibriSpeechError(MlreproError, RuntimeError):
    pass


def manifest_name(split: str) -> str:
    return f"librispeech-{split}-wav.json"


def tokenized_name(manifest: str) -> str:
    """tokenize_transcripts.py get_outputs: <json name without .json>-tokenized.pkl."""
    return f"{manifest.removesuffix('.json')}-tokenized.pkl"


def _sigfigs3(number: float) -> str:
    """SoX's lsx_sigfigs3 (src/util.c): three significant figures with a k/M/G... suffix, as ``soxi -B`` prints."""
    symbols = "\0kMGTPEZY"
    text = f"{number:#.3g}"
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    a = int(whole)
    if exponent:  # sscanf("%u.%ue%u") read three values
        a, c = 100 * a + int(fraction), int(exponent)
    elif fraction and int(fraction):  # two values, b != 0: only below 1000
        return text
    else:
        c = 2
    if c < len(symbols) * 3 - 3:
        suffix = symbols[c // 3].strip("\0")
        text = (f"{a // 100}.{a % 100:02d}", f"{a // 10}.{a % 10}", f"{a}")[c % 3] + suffix
    return text


def _pysox_bitrate(output: str) -> float | None:
    """sox.file_info.bitrate (pysox 1.4.1, NVIDIA's requirements.txt) parsing ``soxi -B``, its quirks kept."""
    prefixes = "\0kMGTPEZY"
    if output == "0":
        return None
    if output[-1] in prefixes:
        return float(output[:-1]) * 1000.0 ** prefixes.index(output[-1])
    return float(output[:-1])


def sox_info(wav: Path, samples: np.ndarray, rate: int) -> dict[str, Any]:
    """What pysox 1.4.1's ``sox.file_info.info`` reports of a 16-bit mono WAV (soxi -c/-r/-b/-B/-D/-s/-e and
    ``sox FILE -n stat``'s mean norm), computed from the samples and the file's size as SoX 14.4.2 does."""
    n = len(samples)
    secs = n / rate  # soxi: (double)(length / channels) / rate
    bitrate = _sigfigs3(8.0 * wav.stat().st_size / secs) if n else "0"  # size_and_bitrate: the whole file
    mean_norm = float(f"{np.abs(samples.astype(np.float64)).mean() / 32768:f}") if n else float("nan")
    return {"channels": 1, "sample_rate": float(f"{rate:g}"), "bitdepth": 16, "bitrate": _pysox_bitrate(bitrate),
            "duration": float(f"{secs:f}") or None, "num_samples": n or None, "encoding": "Signed Integer PCM",
            "silent": not mean_norm >= 0.001}  # pysox silent(): NaN counts as silent


def _convert(flac: Path, wav: Path) -> dict[str, Any]:
    """One FLAC to a WAV at its own rate (speed 1: sox's ``speed 1 rate -h <its rate>`` leaves the samples as they
    are) and the WAV's pysox info."""
    import soundfile

    info = soundfile.info(str(flac))
    if info.channels != 1 or info.subtype != "PCM_16":
        raise LibriSpeechError(f"{flac}: {info.channels} channel(s), {info.subtype}; LibriSpeech is 16-bit mono")
    samples, rate = soundfile.read(str(flac), dtype="int16")
    wav.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(wav), samples, rate, format="WAV", subtype="PCM_16")
    return sox_info(wav, samples, rate)


def convert_set(source: Path, target: Path, split: str, pool: Executor | None = None) -> list[dict[str, Any]]:
    """convert_librispeech.py --input_dir LibriSpeech/<split> --dest_dir LibriSpeech/<split>-wav: every line of
    every *.trans.txt becomes one entry, its FLAC a WAV at the same rate (in ``pool``'s processes, in order)."""
    dest = f"{split}-wav"
    lines = []  # (transcript, flac, wav, fname in the manifest)
    # the reference globs **/*.trans.txt in the file system's order; sorted here, so that two runs agree
    for trans in sorted((source / split).rglob("*.trans.txt")):
        rel = trans.parent.relative_to(source / split)
        with open(trans) as f:
            for line in f:
                fname, _, transcript = line.partition(" ")
                flac = trans.parent / f"{fname}.flac"
                if not flac.is_file():
                    raise LibriSpeechError(f"{trans}: {fname} has no {flac.name} next to it")
                lines.append((transcript, flac, target / dest / rel / f"{fname}.wav",
                              (Path(dest) / rel / f"{fname}.wav").as_posix()))
    flacs, wavs = [line[1] for line in lines], [line[2] for line in lines]
    infos = list(pool.map(_convert, flacs, wavs, chunksize=64) if pool else map(_convert, flacs, wavs))
    entries = []
    for (transcript, _, _, fname), info in zip(lines, infos, strict=True):
        file_info = {**info, "fname": fname, "speed": 1}
        entries.append({"transcript": transcript.lower().strip(), "files": [file_info],
                        "original_duration": file_info["duration"],
                        "original_num_samples": file_info["num_samples"]})
    (target / manifest_name(split)).write_text(json.dumps(entries, indent=2))
    return entries


def train_sentencepieces(manifests: list[Path], folder: Path) -> Path:
    """create_sentencepieces.sh: ``jq -r '.[]["transcript"]'`` of the train-* manifests, one transcript a line,
    into SentencePieceTrainer.train with its flags; writes librispeech1023.model and .vocab into ``folder``."""
    import sentencepiece

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "txt.txt"
        with open(text, "w") as f:
            for manifest in manifests:
                f.writelines(entry["transcript"] + "\n" for entry in json.loads(manifest.read_text()))
        sentencepiece.SentencePieceTrainer.train(
            input=str(text), model_prefix=str(folder / SENTENCEPIECE_NAME), vocab_size=SENTENCEPIECE_VOCAB,
            character_coverage=1.0, bos_id=-1, eos_id=-1, model_type="unigram")
    return folder / f"{SENTENCEPIECE_NAME}.model"


def tokenize(manifests: list[Path], model: Path, folder: Path) -> None:
    """tokenize_transcripts.py --output_dir /metadata (pkl): per manifest a list of {fname, original_duration,
    tokenized_transcript}, the form NVIDIA's DALI sampler (common/data/dali/sampler.py _parse_pkl) reads."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
    folder.mkdir(parents=True, exist_ok=True)
    for manifest in manifests:
        pruned = [{"fname": entry["files"][-1]["fname"], "original_duration": entry["original_duration"],
                   "tokenized_transcript": processor.encode(entry["transcript"])}
                  for entry in json.loads(manifest.read_text())]
        with open(folder / tokenized_name(manifest.name), "wb") as f:
            pickle.dump(pruned, f, protocol=PICKLE_PROTOCOL)


def prepare(source: Path, out: Path, jobs: int | None = None) -> None:
    """``source``: the extracted LibriSpeech/ (its FLAC already placed under out/LibriSpeech/); ``jobs``
    conversions at once, by default one per CPU this process may use (convert_librispeech.py --parallel)."""
    jobs = jobs or len(os.sched_getaffinity(0))
    target = out / "LibriSpeech"
    splits = [s for s in SETS if (source / s).is_dir()]
    if not any(s.startswith("train-") for s in splits):
        raise LibriSpeechError(f"{source}: no train-* set; create_sentencepieces.sh trains the sentencepiece "
                               "model on the transcripts of librispeech-train-*-wav.json")
    # spawn: a clean process per worker, whatever threads the caller runs
    with (ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) if jobs > 1
          else nullcontext()) as pool:
        for split in splits:
            convert_set(source, target, split, pool)
    # the shell globs librispeech-train-*-wav.json and librispeech-*.json: in sorted order
    model = train_sentencepieces(sorted(target.glob(manifest_name("train-*"))), out / "sentencepieces")
    tokenize(sorted(target.glob("librispeech-*.json")), model, out / "metadata")
