"""BERT (datasets.md section 2): the results4 text shards -> NVIDIA's varlength HDF5 shards, and the TF1
phase-1 checkpoint -> NVIDIA's PyTorch checkpoint, as NVIDIA's v1.1 ``input_preprocessing/prepare_data.sh`` does.

Followed exactly (V11 = mlcommons/training_results_v1.1 NVIDIA/benchmarks/bert/implementations/pytorch):
- V11:input_preprocessing/tokenization.py (BasicTokenizer + WordpieceTokenizer, lower case);
- V11:input_preprocessing/create_pretraining_data.py, the reference's mlcommons/training
  language_model/tensorflow/bert/cleanup_scripts/create_pretraining_data.py with an HDF5 writer: one Python
  ``random.Random(12345)`` per input file, seq 512, 76 predictions, masked_lm_prob 0.15, dupe_factor 10;
- V11:input_preprocessing/chop_hdf5_files.py (its shard sizes and the samples it drops, see ``shard_sizes``),
  convert_fixed2variable.py, pick_eval_samples.py and hdf5_md5.py;
- V11:convert_tf_checkpoint.py with modeling.py's ``load_tf_weights_in_bert`` and BertForPretraining's layout.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlrepro.core.errors import MlreproError

MAX_SEQ_LENGTH = 512
MAX_PREDICTIONS = 76
MASKED_LM_PROB = 0.15
DUPE_FACTOR = 10
SHORT_SEQ_PROB = 0.1
RANDOM_SEED = 12345
EVAL_SAMPLES = 10000


class BertDataError(MlreproError, RuntimeError):
    pass


# --- tokenization.py ------------------------------------------------------------------------------------


def load_vocab(path: Path) -> dict[str, int]:
    """tokenization.load_vocab: one token a line, stripped; a repeated token keeps its first index."""
    vocab: dict[str, int] = {}
    with open(path, "rb") as f:  # lines end at b"\n" only, as GFile.readline's
        for line in f:
            token = line.decode("utf-8", "ignore").strip()
            if token not in vocab:
                vocab[token] = len(vocab)
    return vocab


def _is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char: str) -> bool:
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in (
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


class Tokenizer:
    """tokenization.FullTokenizer(do_lower_case=True) with preserve_unused_tokens False (its default)."""

    def __init__(self, vocab: dict[str, int], max_input_chars_per_word: int = 200) -> None:
        self.vocab = vocab
        self.max_chars = max_input_chars_per_word

    def basic(self, text: str) -> list[str]:
        chars = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            chars.append(" " if _is_whitespace(char) else f" {char} " if cp >= 0x3400 and _is_chinese_char(cp)
                         else char)
        split: list[str] = []
        for token in "".join(chars).split():
            token = "".join(c for c in unicodedata.normalize("NFD", token.lower())
                            if unicodedata.category(c) != "Mn")
            word: list[str] = []
            for char in token:
                if _is_punctuation(char):
                    split.extend(["".join(word)] if word else [])
                    split.append(char)
                    word = []
                else:
                    word.append(char)
            split.extend(["".join(word)] if word else [])
        return " ".join(split).split()

    def wordpiece(self, token: str) -> list[str]:
        if len(token) > self.max_chars:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(token):
            end = len(token)
            while start < end:
                piece = token[start:end] if start == 0 else "##" + token[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            else:
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        return [piece for token in self.basic(text) for piece in self.wordpiece(token)]


# --- create_pretraining_data.py ---------------------------------------------------------------------------


@dataclass
class Instance:
    tokens: list[str]
    segment_ids: list[int]
    masked_lm_positions: list[int]
    masked_lm_labels: list[str]
    is_random_next: bool


def read_documents(files: Iterable[Path], tokenizer: Tokenizer) -> list[list[list[str]]]:
    """One sentence a line, blank lines between documents; empty documents dropped."""
    documents: list[list[list[str]]] = [[]]
    for path in files:
        with open(path, "rb") as f:  # GFile(path, "r").readline(): lines end at b"\n", strict UTF-8
            for n, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8").strip()
                except UnicodeDecodeError as e:
                    raise BertDataError(f"{path}:{n}: not UTF-8 ({e.reason} at byte {e.start})") from e
                if not line:
                    documents.append([])
                if tokens := tokenizer.tokenize(line):
                    documents[-1].append(tokens)
    return [d for d in documents if d]


def create_training_instances(files: Iterable[Path], tokenizer: Tokenizer, rng: random.Random,
                              max_seq_length: int = MAX_SEQ_LENGTH, dupe_factor: int = DUPE_FACTOR,
                              short_seq_prob: float = SHORT_SEQ_PROB, masked_lm_prob: float = MASKED_LM_PROB,
                              max_predictions: int = MAX_PREDICTIONS) -> list[Instance]:
    documents = read_documents(files, tokenizer)
    rng.shuffle(documents)
    vocab_words = list(tokenizer.vocab)
    instances: list[Instance] = []
    for _ in range(dupe_factor):
        for index in range(len(documents)):
            instances.extend(_instances_from_document(documents, index, max_seq_length, short_seq_prob,
                                                      masked_lm_prob, max_predictions, vocab_words, rng))
    rng.shuffle(instances)
    return instances


def _instances_from_document(documents: list[list[list[str]]], document_index: int, max_seq_length: int,
                             short_seq_prob: float, masked_lm_prob: float, max_predictions: int,
                             vocab_words: list[str], rng: random.Random) -> list[Instance]:
    document = documents[document_index]
    max_num_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP]
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances: list[Instance] = []
    chunk: list[list[str]] = []
    length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target_seq_length:
            if chunk:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                tokens_a = [t for segment in chunk[:a_end] for t in segment]
                tokens_b: list[str] = []
                if len(chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_index = rng.randint(0, len(documents) - 1)
                        if random_index != document_index:
                            break
                    random_document = documents[random_index]
                    for j in range(rng.randint(0, len(random_document) - 1), len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    i -= len(chunk) - a_end  # the unused segments go back
                else:
                    is_random_next = False
                    tokens_b = [t for segment in chunk[a_end:] for t in segment]
                _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                if not tokens_a or not tokens_b:
                    raise BertDataError("create_pretraining_data.py asserts both segments are non-empty")
                tokens = ["[CLS]", *tokens_a, "[SEP]", *tokens_b, "[SEP]"]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                tokens, positions, labels = _masked_lm_predictions(tokens, masked_lm_prob, max_predictions,
                                                                   vocab_words, rng)
                instances.append(Instance(tokens, segment_ids, positions, labels, is_random_next))
            chunk, length = [], 0
        i += 1
    return instances


def _masked_lm_predictions(tokens: list[str], masked_lm_prob: float, max_predictions: int,
                           vocab_words: list[str], rng: random.Random) -> tuple[list[str], list[int], list[str]]:
    candidates = [i for i, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
    rng.shuffle(candidates)
    output = list(tokens)
    num_to_predict = min(max_predictions, max(1, round(len(tokens) * masked_lm_prob)))
    masked: list[tuple[int, str]] = []
    covered: set[int] = set()
    for index in candidates:
        if len(masked) >= num_to_predict:
            break
        if index in covered:
            continue
        covered.add(index)
        if rng.random() < 0.8:
            output[index] = "[MASK]"
        elif rng.random() < 0.5:
            output[index] = tokens[index]
        else:
            output[index] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
        masked.append((index, tokens[index]))
    masked.sort(key=lambda m: m[0])
    return output, [m[0] for m in masked], [m[1] for m in masked]


def _truncate_seq_pair(tokens_a: list[str], tokens_b: list[str], max_num_tokens: int, rng: random.Random) -> None:
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


# --- the samples as NVIDIA's HDF5 holds them ----------------------------------------------------------------

Sample = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]  # input_ids, segment_ids, positions, ids, nsp


def to_sample(instance: Instance, vocab: dict[str, int]) -> Sample:
    """One instance in the varlength layout (convert_fixed2variable.py: the ids up to the mask's length, the
    predictions up to the first zero position; int16 and int8 as the fixed-length files store them)."""
    return (np.asarray([vocab[t] for t in instance.tokens], dtype=np.int16),
            np.asarray(instance.segment_ids, dtype=np.int8),
            np.asarray(instance.masked_lm_positions, dtype=np.int16),
            np.asarray([vocab[t] for t in instance.masked_lm_labels], dtype=np.int16),
            int(instance.is_random_next))


def samples_from_text(files: Sequence[Path], vocab: dict[str, int]) -> list[Sample]:
    """create_pretraining_data.py on ``files`` (one run: one RNG seeded 12345)."""
    if missing := [t for t in ("[CLS]", "[SEP]", "[MASK]", "[UNK]") if t not in vocab]:
        raise BertDataError(f"the vocabulary has no {', '.join(missing)}; the samples need them")
    instances = create_training_instances(files, Tokenizer(vocab), random.Random(RANDOM_SEED))
    return [to_sample(i, vocab) for i in instances]


def write_varlength(path: Path, samples: Sequence[Sample]) -> None:
    """convert_fixed2variable.py's file: four vlen datasets and next_sentence_labels (int8); written to a
    temporary name and renamed, so that a killed step leaves no file that looks complete."""
    import h5py

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(tmp, "w") as f:
        n = len(samples)
        for column, (name, dtype) in enumerate((("input_ids", np.int16), ("segment_ids", np.int8),
                                                ("masked_lm_positions", np.int16),
                                                ("masked_lm_ids", np.int16))):
            rows = np.empty(n, dtype=object)
            for i, sample in enumerate(samples):
                rows[i] = sample[column]
            f.create_dataset(name, (n,), dtype=h5py.vlen_dtype(np.dtype(dtype)), data=rows)
        f.create_dataset("next_sentence_labels", data=np.asarray([s[4] for s in samples], dtype=np.int8),
                         dtype="i1")
    os.replace(tmp, path)


def shard_sizes(n_samples: int, n_shards: int) -> list[int]:
    """The samples per output shard that chop_hdf5_files.py writes, in order; the samples after them are
    dropped as that script drops them. Its reset ``if ofile_entry_idx < n_excess`` runs after
    ``ofile_entry_idx = 0``, so the first shard gets nominal-1 samples and every later one nominal-1 when there
    is any excess, else nominal; the samples left after the last shard fill a buffer that is never written
    (and the script fails with an IndexError once that buffer is full)."""
    nominal = (n_samples + n_shards - 1) // n_shards
    excess = n_shards * nominal - n_samples
    later = nominal - 1 if excess > 0 else nominal
    sizes = [nominal - 1] + [later] * (n_shards - 1)
    left = n_samples - sum(sizes)
    if nominal < 2 or left > later:
        raise BertDataError(f"chop_hdf5_files.py cannot cut {n_samples} samples into {n_shards} shards "
                            f"({'fewer than two samples a shard' if nominal < 2 else 'it fails with an IndexError'});"
                            " choose another prepare.shards")
    return sizes


def chop(samples: Iterable[Sample], n_samples: int, n_shards: int) -> Iterator[list[Sample]]:
    sizes = iter(shard_sizes(n_samples, n_shards))
    size, shard = next(sizes), []
    for sample in samples:
        shard.append(sample)
        if len(shard) == size:
            yield shard
            size, shard = next(sizes, -1), []
            if size < 0:
                return


def pick_eval(samples: Sequence[Sample], n: int = EVAL_SAMPLES) -> list[Sample]:
    """pick_eval_samples.py: sample int(i * len/n) for i < n (repeats when there are fewer than n)."""
    ratio = len(samples) / n
    return [samples[int(i * ratio)] for i in range(n)]


# --- hdf5_md5.py: the checksums NVIDIA publishes (*_shards_varlength.chk, eval_varlength.chk) ----------------


def hdf5_md5(path: Path) -> str:
    """md5 of the list of the per-sample md5s of str(input_ids.tolist())."""
    import h5py

    with h5py.File(path, "r") as f:
        ids = f["input_ids"][:]  # read at once: the same rows as hdf5_md5.py's f['input_ids'][i], faster
        rows = [hashlib.md5(str(row.tolist()).encode()).hexdigest() for row in ids]
    return hashlib.md5(str(rows).encode()).hexdigest()


def check_chk(folder: Path, chk: Path) -> None:
    """Every line of ``chk`` (``name<TAB>md5`` as hdf5_md5.py prints it) against the file of that name."""
    bad = []
    for n, line in enumerate(chk.read_text().splitlines(), 1):
        if not line.strip():
            continue
        name, _, digest = line.partition("\t")
        path = folder / name
        if "/" in name or not digest:
            raise BertDataError(f"{chk}:{n}: not a line of hdf5_md5.py (name<TAB>md5): {line[:200]!r}")
        actual = hdf5_md5(path) if path.is_file() else "missing"
        if actual != digest.strip():
            bad.append(f"{name}: {actual}, {chk.name} says {digest.strip()}")
    if bad:
        raise BertDataError(f"{folder}: {len(bad)} HDF5 file(s) differ from {chk}: " + "; ".join(bad[:20]))


# --- the whole preparation ---------------------------------------------------------------------------------


def _part(args: tuple[Path, Path]) -> tuple[Path, int]:
    """One results4 part -> a temporary .npz of its samples in order (parallel_create_hdf5.sh runs one
    create_pretraining_data.py per part)."""
    text, tmp = args
    samples = samples_from_text([text], load_vocab(tmp.parent / "vocab.txt"))
    flat = {
        "lengths": np.asarray([[len(s[0]), len(s[2])] for s in samples], dtype=np.int64).reshape(-1, 2),
        "input_ids": np.concatenate([s[0] for s in samples]) if samples else np.zeros(0, np.int16),
        "segment_ids": np.concatenate([s[1] for s in samples]) if samples else np.zeros(0, np.int8),
        "positions": np.concatenate([s[2] for s in samples]) if samples else np.zeros(0, np.int16),
        "ids": np.concatenate([s[3] for s in samples]) if samples else np.zeros(0, np.int16),
        "nsp": np.asarray([s[4] for s in samples], dtype=np.int8)}
    np.savez(tmp, **flat)
    return tmp, len(samples)


def _load_part(path: Path) -> Iterator[Sample]:
    with np.load(path) as f:
        lengths, nsp = f["lengths"], f["nsp"]
        ends = np.cumsum(lengths, axis=0)
        columns = [np.split(f[k], ends[:-1, 0 if k in ("input_ids", "segment_ids") else 1])
                   for k in ("input_ids", "segment_ids", "positions", "ids")]
    for i in range(len(nsp)):
        yield columns[0][i], columns[1][i], columns[2][i], columns[3][i], int(nsp[i])


def prepare_hdf5(results4: Path, vocab: Path, out: Path, n_shards: int, workers: int | None = None) -> None:
    """prepare_data.sh's HDF5 steps: out/hdf5/training-N/hdf5_N_shards_varlength/ and out/hdf5/eval_varlength/."""
    parts = sorted(results4.glob("part-00???-of-00500"))
    if not parts:
        raise BertDataError(f"{results4}: no part-00NNN-of-00500 text shards")
    if not (results4 / "eval.txt").is_file():
        raise BertDataError(f"{results4}: no eval.txt")
    work = out / "hdf5" / ".work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "vocab.txt").write_bytes(vocab.read_bytes())
    jobs = [(p, work / f"{p.name}.npz") for p in parts]
    workers = workers or max(1, min(len(jobs), (os.cpu_count() or 2) // 2))
    if workers == 1:
        done = [_part(j) for j in jobs]
    else:
        with ProcessPoolExecutor(workers) as pool:
            done = list(pool.map(_part, jobs))
    total = sum(n for _, n in done)
    target = out / "hdf5" / f"training-{n_shards}" / f"hdf5_{n_shards}_shards_varlength"
    every = (s for path, _ in done for s in _load_part(path))
    for index, shard in enumerate(chop(every, total, n_shards)):
        write_varlength(target / f"part_{index:05d}_of_{n_shards:05d}.hdf5", shard)
    eval_samples = samples_from_text([results4 / "eval.txt"], load_vocab(vocab))
    write_varlength(out / "hdf5" / "eval_varlength" / "part_eval_10k.hdf5", pick_eval(eval_samples))
    for path in work.iterdir():
        path.unlink()
    work.rmdir()


# --- convert_tf_checkpoint.py --------------------------------------------------------------------------------

_SKIPPED = {"adam_v", "adam_m", "global_step", "LAMB", "LAMB_1", "beta1_power", "beta2_power"}
_RENAMED = {"kernel": "weight", "gamma": "weight", "output_bias": "bias", "beta": "bias", "output_weights": "weight"}


def pytorch_name(tf_name: str) -> tuple[str, bool] | None:
    """load_tf_weights_in_bert's walk from a TF variable name to the PyTorch parameter (and whether the array
    is transposed); None for the optimizer's variables it skips."""
    parts = tf_name.split("/")
    if any(p in _SKIPPED for p in parts):
        return None
    names = []
    for part in parts:
        base, *num = re.split(r"_(\d+)", part)[:2] if re.fullmatch(r"[A-Za-z]+_\d+", part) else [part]
        names.extend([_RENAMED.get(base, base), *num])
    if parts[-1].endswith("_embeddings"):
        names.append("weight")
    return ".".join(names), parts[-1] == "kernel"


def state_dict_layout(config: dict) -> dict[str, tuple[int, ...]]:
    """BertForPretraining(config).state_dict() keys and shapes, in order, with the converter's flags (no fused
    or unpadded modules) and the vocabulary padded to a multiple of 8."""
    vocab = config["vocab_size"] + (-config["vocab_size"]) % 8
    h, inter = config["hidden_size"], config["intermediate_size"]

    def linear(name: str, n_in: int, n_out: int) -> dict[str, tuple[int, ...]]:
        return {f"{name}.weight": (n_out, n_in), f"{name}.bias": (n_out,)}

    def norm(name: str) -> dict[str, tuple[int, ...]]:
        return {f"{name}.weight": (h,), f"{name}.bias": (h,)}

    layout: dict[str, tuple[int, ...]] = {
        "bert.embeddings.word_embeddings.weight": (vocab, h),
        "bert.embeddings.position_embeddings.weight": (config["max_position_embeddings"], h),
        "bert.embeddings.token_type_embeddings.weight": (config["type_vocab_size"], h),
        **norm("bert.embeddings.LayerNorm")}
    for n in range(config["num_hidden_layers"]):
        layer = f"bert.encoder.layer.{n}"
        for part in ("query", "key", "value"):
            layout.update(linear(f"{layer}.attention.self.{part}", h, h))
        layout.update({**linear(f"{layer}.attention.output.dense", h, h), **norm(f"{layer}.attention.output.LayerNorm"),
                       **linear(f"{layer}.intermediate.dense", h, inter), **linear(f"{layer}.output.dense", inter, h),
                       **norm(f"{layer}.output.LayerNorm")})
    layout.update({**linear("bert.pooler.dense", h, h), "cls.predictions.bias": (vocab,),
                   **linear("cls.predictions.transform.dense", h, h), **norm("cls.predictions.transform.LayerNorm"),
                   "cls.predictions.decoder.weight": (vocab, h), **linear("cls.seq_relationship", h, 2)})
    return layout


def convert_checkpoint(variables: dict[str, np.ndarray], config: dict) -> collections.OrderedDict:
    """The state dict convert_tf_checkpoint.py saves under 'model'. A smaller TF array goes into the corner of
    a zeroed padded tensor; the decoder shares the word embeddings (tied weights). A parameter the TF
    checkpoint lacks would keep its random initialisation in NVIDIA's converter: here it is an error."""
    import torch

    layout = state_dict_layout(config)
    tensors: dict[str, torch.Tensor] = {}
    for tf_name in sorted(variables):
        mapped = pytorch_name(tf_name)
        if mapped is None:
            continue
        key, transpose = mapped
        if key not in layout or key == "cls.predictions.decoder.weight":
            raise BertDataError(f"TF variable {tf_name} ({key}) is no parameter of NVIDIA's BertForPretraining")
        array = np.ascontiguousarray(variables[tf_name].T if transpose else variables[tf_name])
        shape = layout[key]
        if array.shape == shape:
            tensors[key] = torch.from_numpy(array.copy())
        elif array.ndim == len(shape) and all(a <= s for a, s in zip(array.shape, shape, strict=True)):
            padded = torch.zeros(shape, dtype=torch.from_numpy(array).dtype)
            padded[tuple(slice(0, a) for a in array.shape)] = torch.from_numpy(array)
            tensors[key] = padded
        else:
            raise BertDataError(f"TF variable {tf_name} has shape {array.shape}; {key} is {shape}")
    tensors["cls.predictions.decoder.weight"] = tensors.get("bert.embeddings.word_embeddings.weight")
    missing = [k for k in layout if tensors.get(k) is None]
    if missing:
        raise BertDataError(f"the TF checkpoint has no variable for {', '.join(missing[:10])}")
    return collections.OrderedDict((k, tensors[k]) for k in layout)


def convert_tf_checkpoint(prefix: Path, config_path: Path, output: Path) -> None:
    import torch

    from mlrepro.datasets import tf_checkpoint

    state = convert_checkpoint(tf_checkpoint.read(prefix), json.loads(config_path.read_text()))
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    torch.save({"model": state}, tmp)
    os.replace(tmp, output)
