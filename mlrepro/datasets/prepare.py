"""Preprocessing in the project's own Python, for implementations that bring no scripts of their own.

Each function lays one dataset out as the implementation mounts it (../shared/reference/datasets.md,
the section of the benchmark); the recipe names it under ``prepare.python``. Files that stay as they
are hard-linked from the extracted folder (copied across file systems).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mlrepro.datasets.recipe import Recipe

Preparer = Callable[[Recipe, Path, Path, Path], None]
PREPARERS: dict[str, Preparer] = {}


class PrepareError(RuntimeError):
    pass


def preparer(fn: Preparer) -> Preparer:
    PREPARERS[fn.__name__] = fn
    return fn


def run(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    name = recipe.prepare.get("python")
    if name not in PREPARERS:
        raise PrepareError(f"{recipe.path}: prepare.python {name!r} is not one of {', '.join(sorted(PREPARERS))}")
    PREPARERS[name](recipe, extracted, downloads, out)


def _place(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _place_tree(src: Path, dst: Path) -> None:
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        _place(path, dst / path.relative_to(src))


def check_published(recipe: Recipe, downloads: Path, out: Path) -> None:
    """Checksums the reference publishes for preprocessed files (KiTS19 ``checksum.json``: name -> md5)."""
    published = recipe.prepare.get("published_md5")
    if not published:
        return
    expected = json.loads((downloads / published).read_text())
    bad = []
    for name, digest in sorted(expected.items()):
        path = out / name
        actual = hashlib.md5(path.read_bytes()).hexdigest() if path.is_file() else "missing"
        if actual != digest:
            bad.append(f"{name}: md5 is {actual}, {published} says {digest}")
    if bad:
        raise PrepareError(f"{recipe.benchmark}: prepared files differ from the published checksums: "
                           + "; ".join(bad))


# --- ResNet-50: ImageNet as MXNet RecordIO, pass-through (NVIDIA prepare_imagenet.sh: im2rec) -----------

_RECORDIO_MAGIC = 0xCED7230A


def _write_recordio(images: list[tuple[int, Path]], prefix: Path, root: Path) -> None:
    """im2rec --pass-through: the JPEG bytes unchanged behind MXNet's IRHeader, with a .lst and an .idx."""
    with open(f"{prefix}.rec", "wb") as rec, open(f"{prefix}.idx", "w") as idx, open(f"{prefix}.lst", "w") as lst:
        for i, (label, path) in enumerate(images):
            payload = struct.pack("<IfQQ", 0, float(label), i, 0) + path.read_bytes()
            idx.write(f"{i}\t{rec.tell()}\n")
            lst.write(f"{i}\t{float(label):f}\t{path.relative_to(root).as_posix()}\n")
            rec.write(struct.pack("<II", _RECORDIO_MAGIC, len(payload)))
            rec.write(payload + b"\0" * (-len(payload) % 4))


@preparer
def imagenet(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    train, val = extracted / "train", extracted / "val"
    classes = sorted(p.name for p in train.iterdir() if p.is_dir())
    label = {wnid: i for i, wnid in enumerate(classes)}
    # valprep.sh (soumith/imagenetloader.torch) is a list of "mv FILE WNID/": read it, never run it
    moves = re.findall(r"^mv\s+(\S+)\s+(n\d{8})/?\s*$", (downloads / "valprep.sh").read_text(), re.M)
    val_images = []
    for name, wnid in moves:
        if (val / name).is_file():
            if wnid not in label:
                raise PrepareError(f"valprep.sh puts {name} into class {wnid}, which train/ does not have")
            val_images.append((label[wnid], val / name))
    train_images = [(label[w], p) for w in classes for p in sorted((train / w).iterdir()) if p.is_file()]
    rng = random.Random(100)  # im2rec --list shuffles with seed 100
    rng.shuffle(train_images)
    rng.shuffle(val_images)
    out.mkdir(parents=True, exist_ok=True)
    _write_recordio(train_images, out / "train", train)
    _write_recordio(val_images, out / "val", val)


# --- BERT: NVIDIA's prepare_data.sh in our own Python (mlrepro/datasets/bert.py) ---------------------------


@preparer
def bert(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    from mlrepro.datasets import bert as steps
    from mlrepro.datasets.tf_checkpoint import CheckpointError

    shards = recipe.prepare.get("shards", 4320)
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise PrepareError(f"{recipe.path}: prepare.shards is {shards!r}; give a positive number of HDF5 shards")
    phase1 = out / "phase1"
    for name in ("bert_config.json", "vocab.txt"):
        _place(downloads / name, phase1 / name)
    for ckpt in sorted(downloads.glob("model.ckpt-28252.*")):
        _place(ckpt, phase1 / ckpt.name)
    try:
        steps.prepare_hdf5(extracted / "results4", downloads / "vocab.txt", out, shards)
        steps.convert_tf_checkpoint(downloads / "model.ckpt-28252", downloads / "bert_config.json",
                                    phase1 / "model.ckpt-28252.pt")
        # NVIDIA's hdf5_md5.py checksums of the prepared shards, where the recipe downloads them
        sources = {s.file for s in recipe.sources}
        for folder, chk in (recipe.prepare.get("chk") or {}).items():
            target = (out / folder).resolve()
            if not target.is_relative_to(out.resolve()):
                raise PrepareError(f"{recipe.path}: prepare.chk folder {folder!r} is outside the prepared folder")
            if chk in sources:
                steps.check_chk(target, downloads / chk)
    except (steps.BertDataError, CheckpointError) as e:
        raise PrepareError(f"{recipe.path}: {e}") from e


# --- Mask R-CNN and SSD: COCO 2017 ---------------------------------------------------------------------


def _coco(extracted: Path, out: Path) -> Path:
    coco = out / "coco2017"
    for part in ("train2017", "val2017", "annotations"):
        if not (extracted / part).is_dir():
            raise PrepareError(f"{extracted}: no {part}/ after extraction")
        _place_tree(extracted / part, coco / part)
    return coco


@preparer
def coco_maskrcnn(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    from pycocotools.coco import COCO

    coco = _coco(extracted, out)
    _place(downloads / "R-50.pkl", coco / "models" / "R-50.pkl")
    # pickle_coco_annotations.py: the pycocotools COCO object of the training annotations (mounted at /pkl_coco)
    (out / "pkl_coco").mkdir()
    with open(out / "pkl_coco" / "instances_train2017.json.pickled", "wb") as f:
        pickle.dump(COCO(str(coco / "annotations" / "instances_train2017.json")), f)


@preparer
def coco_ssd(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    import torch

    coco = _coco(extracted, out)
    for split in ("train2017", "val2017"):  # prepare-json.py --keep-keys
        data = json.loads((coco / "annotations" / f"instances_{split}.json").read_text())
        data["images"] = [{k: v for k, v in im.items() if k in ("id", "file_name", "height", "width")}
                          for im in data["images"]]
        for a in data["annotations"]:
            a["segmentation"], a["area"] = [], 1.0
        (coco / "annotations" / f"bbox_only_instances_{split}.json").write_text(json.dumps(data))
    # torch_to_numpy.py: the ResNet-34 backbone as a pickled dict of numpy arrays, named like MXNet's layers
    state = torch.load(downloads / "resnet34-333f7ec4.pth", map_location="cpu", weights_only=True)
    arrays = {}
    for key, value in state.items():
        parts = key.split(".")
        if parts[0] in ("layer4", "fc"):
            continue
        stage = block = 0
        if parts[0].startswith("layer"):
            stage, block, parts = int(parts[0][5:]), int(parts[1]), parts[2:]
        if parts[0].startswith("downsample"):
            sub, parts = 3, parts[2:]
        else:
            sub, parts = int("".join(filter(str.isdigit, parts[0]))), parts[1:]
        array = value.numpy()
        tensor = {"bias": "beta"}.get(parts[0], "gamma" if parts[0] == "weight" and array.ndim == 1 else parts[0])
        index = 2 * block + sub - 1 + (1 if stage > 1 and block > 0 else 0)
        name = (f"stage{stage}_" if stage else "") + ("conv" if array.ndim == 4 else "batchnorm")
        arrays[f"{name}{index}_{tensor}"] = array
    (coco / "models").mkdir(exist_ok=True)
    with open(coco / "models" / "resnet34-333f7ec4.pickle", "wb") as f:
        pickle.dump(arrays, f)


# --- RNN-T: LibriSpeech FLAC -> 16 kHz WAV and the manifest JSON (preprocess_librispeech.sh) -----------


@preparer
def librispeech(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    import soundfile

    source = extracted / "LibriSpeech"
    target = out / "LibriSpeech"
    for split in sorted(p.name for p in source.iterdir() if p.is_dir()):
        _place_tree(source / split, target / split)
        entries = []
        for trans in sorted((source / split).rglob("*.trans.txt")):
            for line in trans.read_text().splitlines():
                utt, _, text = line.partition(" ")
                flac = trans.parent / f"{utt}.flac"
                audio, rate = soundfile.read(flac, dtype="int16")
                if rate != 16000:
                    raise PrepareError(f"{flac}: {rate} Hz; LibriSpeech is 16 kHz")
                rel = Path(f"{split}-wav") / flac.relative_to(source / split).with_suffix(".wav")
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                soundfile.write(target / rel, audio, rate, subtype="PCM_16")
                info = {"channels": 1, "sample_rate": rate, "bitdepth": 16, "bitrate": rate * 16,
                        "duration": len(audio) / rate, "num_samples": len(audio),
                        "encoding": "Signed Integer PCM", "silent": bool(not np.any(audio)),
                        "fname": rel.as_posix(), "speed": 1}
                entries.append({"transcript": text.lower(), "files": [info],
                                "original_duration": info["duration"], "original_num_samples": len(audio)})
        (target / f"librispeech-{split}-wav.json").write_text(json.dumps(entries, indent=2))


# --- 3D U-Net: KiTS19 (preprocess_dataset.py of the reference) -------------------------------------------

KITS_SPACING = [1.6, 1.2, 1.2]
KITS_MIN_SHAPE = [128, 128, 128]


@preparer
def kits19(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    import nibabel
    import torch
    from torch.nn.functional import interpolate

    out.mkdir(parents=True, exist_ok=True)
    for case in sorted(p for p in downloads.glob("case_*") if p.is_dir()):
        if int(case.name.split("_")[1]) >= 210:  # the cases without public labels
            continue
        image_nii = nibabel.load(case / "imaging.nii.gz")
        spacing = image_nii.header["pixdim"][1:4].tolist()
        image = image_nii.get_fdata().astype(np.float32)[None]
        label = nibabel.load(case / "segmentation.nii.gz").get_fdata().astype(np.uint8)[None]
        if spacing != KITS_SPACING:
            shape = (np.array(spacing) / np.array(KITS_SPACING) * np.array(image.shape[1:])).astype(int).tolist()
            image = interpolate(torch.from_numpy(image[None]), size=shape, mode="trilinear",
                                align_corners=True)[0].numpy()
            label = interpolate(torch.from_numpy(label[None]), size=shape, mode="nearest")[0].numpy()
        image = (np.clip(image, -79.0, 304.0) - 101.0) / 76.9
        bounds = [max(0, KITS_MIN_SHAPE[i] - image.shape[i + 1]) for i in range(3)]
        pad = [(0, 0)] + [(b // 2, b - b // 2) for b in bounds]
        np.save(out / f"{case.name}_x.npy", np.pad(image, pad, mode="edge").astype(np.float32), allow_pickle=False)
        np.save(out / f"{case.name}_y.npy", np.pad(label, pad, mode="edge").astype(np.uint8), allow_pickle=False)


# --- MiniGo: the checkpoint and the target model in /data ----------------------------------------------


@preparer
def minigo(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    _place_tree(extracted / "checkpoints", out)
    for target in sorted(downloads.glob("target.*")):
        _place(target, out / "target" / target.name)


# --- DLRM: Criteo 1TB day files -> the MLPerf binary (40 int32 per sample) -------------------------------

CRITEO_MAX_INDEX = 40_000_000


def _criteo_day(path: Path) -> np.ndarray:
    rows = []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        for n, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 40:
                raise PrepareError(f"{path}:{n}: {len(fields)} tab-separated fields, a Criteo line has 40")
            dense = [max(int(v), 0) if v else 0 for v in fields[1:14]]
            cats = [int(v, 16) % CRITEO_MAX_INDEX if v else 0 for v in fields[14:]]
            rows.append([int(fields[0]), *dense, *cats])
    return np.asarray(rows, dtype=np.int64).reshape(-1, 40)


@preparer
def criteo(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    days = sorted(extracted.glob("day_*"), key=lambda p: int(p.name.split("_")[1].split(".")[0]))
    if len(days) < 2:
        raise PrepareError(f"{extracted}: Criteo needs at least two days (training days and the last, held out)")
    data = [_criteo_day(p) for p in days]
    # the reference maps every categorical value to its rank among the values seen (its dictionaries)
    stacked = np.concatenate(data)
    for column in range(14, 40):
        _, stacked[:, column] = np.unique(stacked[:, column], return_inverse=True)
    sizes = np.cumsum([0, *(len(d) for d in data)])
    train, last = stacked[: sizes[-2]], stacked[sizes[-2]:]
    half = len(last) // 2
    out.mkdir(parents=True, exist_ok=True)
    train.astype(np.int32).tofile(out / "train_data.bin")
    last[:half].astype(np.int32).tofile(out / "test_data.bin")
    last[half:].astype(np.int32).tofile(out / "val_data.bin")
