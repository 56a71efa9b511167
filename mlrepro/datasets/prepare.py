"""Preprocessing in the project's own Python, for implementations that bring no scripts of their own.

Each function lays one dataset out as the implementation mounts it (../shared/reference/datasets.md,
the section of the benchmark); the recipe names it under ``prepare.python``. Files that stay as they
are hard-linked from the extracted folder (copied across file systems).
"""

from __future__ import annotations

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

from mlrepro.core import names
from mlrepro.core.errors import MlreproError
from mlrepro.datasets.recipe import Recipe

Preparer = Callable[[Recipe, Path, Path, Path], None]
PREPARERS: dict[str, Preparer] = {}


class PrepareError(MlreproError, RuntimeError):
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
        try:  # a downloaded file names these: never read outside the prepared folder
            path = names.inside(out, name)
        except ValueError:
            bad.append(f"{name!r}: not a name inside the prepared folder")
            continue
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


# --- RNN-T: LibriSpeech as NVIDIA mounts it (mlrepro/datasets/librispeech.py) -----------------------------


@preparer
def librispeech(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    from mlrepro.datasets import librispeech as nvidia_librispeech

    _place_tree(extracted / "LibriSpeech", out / "LibriSpeech")  # the FLAC stay next to the WAV, as in /datasets
    try:
        nvidia_librispeech.prepare(extracted / "LibriSpeech", out)
    except nvidia_librispeech.LibriSpeechError as e:
        raise PrepareError(f"{recipe.benchmark}: {e}") from e


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
    from mlrepro.datasets import minigo as frozen  # the protobuf decoding stays off the pipeline's start-up

    _place_tree(extracted / "checkpoints", out)
    for target in sorted(downloads.glob("target.*")):
        _place(target, out / "target" / target.name)
    flags = recipe.prepare.get("architecture") or {}  # architecture.flags' values, if the target differs
    unknown = sorted(set(flags) - set(frozen.ARCHITECTURE_19)) if isinstance(flags, dict) else ["(not a mapping)"]
    if unknown:
        raise PrepareError(f"{recipe.benchmark}: prepare.architecture: unknown {', '.join(map(str, unknown))}; "
                           f"known: {', '.join(frozen.ARCHITECTURE_19)}")
    try:  # target.minigo.tf (and freeze_graph.py's two other copies), as NVIDIA's README makes it
        frozen.write_target(out / "target" / "target", {**frozen.ARCHITECTURE_19, **flags})
    except (frozen.FreezeError, frozen.CheckpointError) as exc:
        raise PrepareError(f"{recipe.benchmark}: {exc}") from exc


# --- DLRM: Criteo 1TB day files -> the MLPerf binaries (40 int32 per sample), as the reference writes them ----


@preparer
def criteo(recipe: Recipe, extracted: Path, downloads: Path, out: Path) -> None:
    from mlrepro.datasets import criteo as dlrm

    try:
        dlrm.prepare(dlrm.day_files(extracted), out)
    except dlrm.CriteoError as exc:
        raise PrepareError(f"{recipe.benchmark}: {exc}") from exc
