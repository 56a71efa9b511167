"""Dataset recipes on tiny files in each real format, served by a local HTTP server (never the real data)."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import requests

from mlrepro.datasets import extract, fetch, prepare, recipe, stamps, steps
from mlrepro.datasets.manifest import MANIFEST, read_manifest
from tests import dataset_sources as src
from tests.conftest import make_job


@pytest.fixture(scope="module")
def server():
    with src.serving() as s:
        yield s


def _run_recipe(benchmark: str, server: src.Server, tmp: Path, files: dict[str, bytes] | None = None,
                **extra: object) -> tuple[recipe.Recipe, Path]:
    files = files or src.MAKERS[benchmark]()
    r = recipe.load(benchmark, src.recipe_for(benchmark, server, tmp, files, extra))
    root = tmp / "data_root" / benchmark
    for manual in r.manual:  # placed by hand where the message says
        (root / "downloads").mkdir(parents=True, exist_ok=True)
        (root / "downloads" / manual.file).write_bytes(files[manual.file])
    receipts = tmp / "receipts"
    steps.download(r, root, receipts / "download.json", progressbar=False)
    steps.verify(r, root, receipts / "verify.json")
    steps.extract(r, root, receipts / "extract.json")
    steps.prepare_step(r, root, receipts / "prepare.json")
    prepared = root / "prepared"
    assert stamps.verify_folders([prepared], progress=False)[0] == []
    assert stamps.changed_files(stamps.read_receipt(receipts / "prepare.json")) == []
    return r, prepared


def _records(rec: Path) -> list[tuple[float, bytes]]:
    """MXNet RecordIO records: (label, image bytes)."""
    data, out, pos = rec.read_bytes(), [], 0
    while pos < len(data):
        magic, length = struct.unpack_from("<II", data, pos)
        assert magic == 0xCED7230A
        payload = data[pos + 8: pos + 8 + length]
        _, label, _, _ = struct.unpack_from("<IfQQ", payload)
        out.append((label, payload[24:]))
        pos += 8 + length + (-length % 4)
    return out


def test_imagenet_becomes_recordio_passthrough(server: src.Server, tmp_path: Path) -> None:
    files = src.imagenet()
    _, prepared = _run_recipe("resnet", server, tmp_path, files)
    assert {p.name for p in prepared.iterdir()} >= {"train.rec", "train.idx", "train.lst", "val.rec", "val.idx"}
    train = _records(prepared / "train.rec")
    assert sorted(label for label, _ in train) == [0.0, 0.0, 1.0, 1.0]
    with tarfile.open(fileobj=io.BytesIO(files["ILSVRC2012_img_train.tar"])) as inner, \
            tarfile.open(fileobj=inner.extractfile("n01443537.tar")) as wnid_tar:
        assert (1.0, wnid_tar.extractfile("n01443537_0.JPEG").read()) in train  # pass-through: bytes unchanged
    val = {img: label for label, img in _records(prepared / "val.rec")}
    with tarfile.open(fileobj=io.BytesIO(files["ILSVRC2012_img_val.tar"])) as val_tar:
        assert val[val_tar.extractfile("ILSVRC2012_val_00000002.JPEG").read()] == 1.0  # valprep.sh: n01443537
    offsets = [int(line.split("\t")[1]) for line in (prepared / "val.idx").read_text().splitlines()]
    assert len(offsets) == 4 and offsets[0] == 0


@pytest.mark.parametrize("benchmark", ["maskrcnn", "ssd"])
def test_coco_layout(benchmark: str, server: src.Server, tmp_path: Path) -> None:
    _, prepared = _run_recipe(benchmark, server, tmp_path)
    coco = prepared / "coco2017"
    assert len(list((coco / "train2017").glob("*.jpg"))) == 2 and len(list((coco / "val2017").glob("*.jpg"))) == 1
    assert (coco / "annotations" / "instances_val2017.json").is_file()
    if benchmark == "maskrcnn":
        assert (coco / "models" / "R-50.pkl").is_file()
        with open(prepared / "pkl_coco" / "instances_train2017.json.pickled", "rb") as f:
            assert sorted(pickle.load(f).getImgIds()) == [1, 2]
    else:
        bbox = json.loads((coco / "annotations" / "bbox_only_instances_train2017.json").read_text())
        assert set(bbox["images"][0]) == {"id", "file_name", "height", "width"}
        assert bbox["annotations"][0]["segmentation"] == [] and bbox["annotations"][0]["bbox"] == [1, 1, 4, 4]
        with open(coco / "models" / "resnet34-333f7ec4.pickle", "rb") as f:
            arrays = pickle.load(f)
        assert set(arrays) == {"conv0_weight", "batchnorm0_gamma", "batchnorm0_beta", "stage1_conv0_weight",
                               "stage2_batchnorm4_beta", "stage2_conv2_weight"}


def test_librispeech_becomes_wav_and_manifest(server: src.Server, tmp_path: Path) -> None:
    import soundfile

    _, prepared = _run_recipe("rnnt", server, tmp_path)
    root = prepared / "LibriSpeech"
    entries = json.loads((root / "librispeech-dev-clean-wav.json").read_text())
    assert [e["transcript"] for e in entries] == ["hello world", "don't stop", "soft", "quiet"]
    wav = root / entries[1]["files"][0]["fname"]
    audio, rate = soundfile.read(wav, dtype="int16")
    assert rate == 16000 and len(audio) == entries[1]["files"][0]["num_samples"] == 2203
    flac, _ = soundfile.read(root / "dev-clean" / "84" / "121123" / "84-121123-0001.flac", dtype="int16")
    assert np.array_equal(audio, flac)


def test_kits19_preprocessed_and_checked_against_published_md5(server: src.Server, tmp_path: Path) -> None:
    files = src.kits19()
    downloads = tmp_path / "reference" / "downloads"
    for name, data in files.items():
        (downloads / name).parent.mkdir(parents=True, exist_ok=True)
        (downloads / name).write_bytes(data)
    reference = tmp_path / "reference" / "out"
    r0 = recipe.load("unet3d")
    prepare.kits19(r0, tmp_path, downloads, reference)
    md5 = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in reference.iterdir()}
    assert sorted(md5) == ["case_00000_x.npy", "case_00000_y.npy", "case_00001_x.npy", "case_00001_y.npy"]
    _, prepared = _run_recipe("unet3d", server, tmp_path / "good", {**files, "checksum.json": json.dumps(md5).encode()})
    x = np.load(prepared / "case_00000_x.npy")
    assert x.dtype == np.float32 and x.shape == (1, 128, 128, 128)  # resampled to 12x16x16, edge-padded
    assert np.load(prepared / "case_00000_y.npy").dtype == np.uint8
    bad = {**md5, "case_00001_y.npy": "0" * 32}
    with pytest.raises(prepare.PrepareError,
                       match=r"case_00001_y\.npy: md5 is [0-9a-f]{32}, checksum\.json says 0{32}"):
        _run_recipe("unet3d", server, tmp_path / "bad", {**files, "checksum.json": json.dumps(bad).encode()})
    assert not (tmp_path / "bad" / "data_root" / "unet3d" / "prepared").exists()


def test_bert_layout(server: src.Server, tmp_path: Path) -> None:
    _, bert = _run_recipe("bert", server, tmp_path / "bert", **src.EXTRA["bert"])
    assert sorted(p.name for p in (bert / "phase1").iterdir()) == [
        "bert_config.json", "model.ckpt-28252.data-00000-of-00001", "model.ckpt-28252.index",
        "model.ckpt-28252.meta", "model.ckpt-28252.pt", "vocab.txt"]
    assert sorted(p.name for p in (bert / "hdf5" / "training-3" / "hdf5_3_shards_varlength").iterdir()) == [
        f"part_{i:05d}_of_00003.hdf5" for i in range(3)]
    assert sorted(p.name for p in (bert / "hdf5").iterdir()) == ["eval_varlength", "training-3"]
    assert [p.name for p in (bert / "hdf5" / "eval_varlength").iterdir()] == ["part_eval_10k.hdf5"]


def test_minigo_layout(server: src.Server, tmp_path: Path) -> None:
    _, minigo = _run_recipe("minigo", server, tmp_path / "minigo", **src.EXTRA["minigo"])
    assert (minigo / "mlperf07" / "work_dir" / "model.ckpt-9383.index").read_bytes() == b"index"
    assert sorted(p.name for p in (minigo / "target").iterdir()) == [
        "target.data-00000-of-00001", "target.evalfp32minigo", "target.index", "target.meta", "target.minigo.tf",
        "target.stagedmodel"]
    from mlrepro.datasets.minigo import read_minigo_model

    metadata, _ = read_minigo_model((minigo / "target" / "target.minigo.tf").read_bytes(), "target.minigo.tf")
    assert (metadata["board_size"], metadata["trunk_layers"]) == (9, 2)  # the graph: tests/test_dataset_minigo.py


def test_criteo_layout(server: src.Server, tmp_path: Path) -> None:
    _, criteo = _run_recipe("dlrm", server, tmp_path / "dlrm")
    train = np.fromfile(criteo / "train_data.bin", dtype=np.int32).reshape(-1, 40)
    test = np.fromfile(criteo / "test_data.bin", dtype=np.int32).reshape(-1, 40)
    val = np.fromfile(criteo / "val_data.bin", dtype=np.int32).reshape(-1, 40)
    assert (len(train), len(test), len(val)) == (6, 3, 3)  # day 0 trains, day 1 is halved
    # categorical values become their first-seen index (tests/test_dataset_criteo.py: bytes as the reference's)
    assert set(train[:, 0]) <= {0, 1} and (train[:, 1:14] >= 0).all() and (train[:, 14:] < 6).all()


def test_interrupted_download_resumes(server: src.Server, tmp_path: Path) -> None:
    files = {**src.minigo(), "target.data-00000-of-00001": np.random.default_rng(0).bytes(300_000)}
    r = recipe.load("minigo", src.recipe_for("minigo", server, tmp_path, files))
    downloads = tmp_path / "root" / "downloads"
    server.drop["minigo/target.data-00000-of-00001"] = 200_000
    with pytest.raises(requests.RequestException):
        fetch.download(r, tmp_path / "root", downloads, retries=0, progressbar=False)
    partial = downloads / ".target.data-00000-of-00001.partial"
    have = partial.stat().st_size
    assert 100_000 < have <= 200_000 and not (downloads / "target.data-00000-of-00001").exists()
    fetch.download(r, tmp_path / "root", downloads, retries=0, progressbar=False)
    assert (downloads / "target.data-00000-of-00001").read_bytes() == files["target.data-00000-of-00001"]
    assert ("minigo/target.data-00000-of-00001", f"bytes={have}-") in server.requests
    assert not partial.exists()


def test_wrong_checksum_names_file_and_hashes_and_leaves_nothing(server: src.Server, tmp_path: Path) -> None:
    files = src.bert()
    path = src.recipe_for("bert", server, tmp_path, files)
    path.write_text(path.read_text().replace(hashlib.md5(files["vocab.txt"]).hexdigest(), "f" * 32))
    r = recipe.load("bert", path)
    downloads = tmp_path / "root" / "downloads"
    actual = hashlib.md5(files["vocab.txt"]).hexdigest()
    with pytest.raises(fetch.DatasetError, match=rf"downloads/vocab\.txt .*expected md5:{'f' * 32} but got {actual}"):
        fetch.download(r, tmp_path / "root", downloads, retries=0, progressbar=False)
    assert not (downloads / "vocab.txt").exists() and not list(downloads.glob(".vocab*"))
    assert not (downloads / MANIFEST).exists()


def test_first_download_records_a_checksum_and_later_copies_must_match(server: src.Server, tmp_path: Path) -> None:
    files = src.minigo()
    r = recipe.load("minigo", src.recipe_for("minigo", server, tmp_path, files))
    root = tmp_path / "root"
    steps.download(r, root, tmp_path / "d.json", progressbar=False)
    steps.verify(r, root, tmp_path / "v.json")
    recorded = (root / fetch.RECORDED).read_text()
    assert f"{hashlib.sha256(files['target.index']).hexdigest()}  target.index" in recorded
    (root / "downloads" / "target.index").write_bytes(b"another copy")
    with pytest.raises(fetch.DatasetError, match=r"target\.index: sha256 is [0-9a-f]{64}, expected .* \(recorded\)"):
        steps.verify(r, root, tmp_path / "v.json")


def _tar_with(member: tarfile.TarInfo, data: bytes = b"") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        member.size = len(data) if member.isfile() else 0
        tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize("member, problem", [
    (_member("../x"), "'..' component"),
    (_member("/etc/x"), "absolute path"),
    (_member("ok/link", tarfile.SYMTYPE, "../../outside"), "outside the target folder"),
    (_member("hard", tarfile.LNKTYPE, "/etc/passwd"), "outside the target folder"),
    (_member("dev", tarfile.CHRTYPE), "device or FIFO"),
    (_member("fifo", tarfile.FIFOTYPE), "device or FIFO"),
])
def test_unsafe_tar_members_are_refused(tmp_path: Path, member: tarfile.TarInfo, problem: str) -> None:
    archive = tmp_path / "evil.tar"
    archive.write_bytes(_tar_with(member, b"x"))
    dest = tmp_path / "a" / "b"
    with pytest.raises(extract.UnsafeArchiveError, match=rf"evil\.tar: member '{member.name}'.*{problem}"):
        extract.extract(archive, dest)
    assert not (tmp_path / "x").exists() and not (tmp_path / "a" / "x").exists()


@pytest.mark.parametrize("name, mode, problem", [
    ("../x", 0o100644, "'..' component"), ("/etc/x", 0o100644, "absolute path"),
    ("link", 0o120777, "symbolic link"), ("dev", 0o020644, "device or FIFO"),
])
def test_unsafe_zip_members_are_refused(tmp_path: Path, name: str, mode: int, problem: str) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("fine.txt", b"fine")
        info = zipfile.ZipInfo(name)
        info.external_attr = mode << 16
        zf.writestr(info, b"../../outside")
    with pytest.raises(extract.UnsafeArchiveError, match=rf"evil\.zip: member '{name}'.*{problem}"):
        extract.extract(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "fine.txt").exists()  # checked before anything is written


def test_unsafe_archive_in_a_recipe_leaves_no_extracted_folder(server: src.Server, tmp_path: Path) -> None:
    files = src.minigo()
    files["checkpoint.tar.gz"] = _tar_with(_member("../escape"), b"x")
    r = recipe.load("minigo", src.recipe_for("minigo", server, tmp_path, files))
    root = tmp_path / "root"
    steps.download(r, root, tmp_path / "d.json", progressbar=False)
    steps.verify(r, root, tmp_path / "v.json")
    with pytest.raises(extract.UnsafeArchiveError, match=r"checkpoint\.tar\.gz: member '\.\./escape'"):
        steps.extract(r, root, tmp_path / "e.json")
    assert not (root / "extracted").exists() and not (root / "escape").exists()
    assert not (tmp_path / "e.json").exists()


def test_free_space_is_checked_before_extraction(server: src.Server, tmp_path: Path) -> None:
    files = src.minigo()
    r = recipe.load("minigo", src.recipe_for("minigo", server, tmp_path, files, {"sizes": {"extracted": 10**18}}))
    root = tmp_path / "root"
    steps.download(r, root, tmp_path / "d.json", progressbar=False)
    steps.verify(r, root, tmp_path / "v.json")
    with pytest.raises(fetch.DatasetError,
                       match=r"not enough free space for minigo extracted in .*: it needs 1e\+09 GB"):
        steps.extract(r, root, tmp_path / "e.json")


def test_two_pipelines_preparing_one_data_root_at_once(server: src.Server, tmp_path: Path) -> None:
    files = src.minigo()
    path = src.recipe_for("minigo", server, tmp_path, files)
    r = recipe.load("minigo", path)
    root = tmp_path / "shared"
    steps.download(r, root, tmp_path / "d.json", progressbar=False)
    steps.verify(r, root, tmp_path / "v.json")
    jobs = [make_job("data_extract", input={"recipe": path}, output={"receipt": tmp_path / f"e{i}.json"},
                     params={"step": "extract", "root": root, "group": ""}, wildcards={"benchmark": "minigo"})
            for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-P", "-m", "mlrepro.jobs"], stdin=subprocess.PIPE, text=True)
             for _ in jobs]
    for proc, job in zip(procs, jobs, strict=True):  # both started before either is given its job
        assert proc.stdin is not None
        proc.stdin.write(job.to_json())
        proc.stdin.close()
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    receipts = [json.loads((tmp_path / f"e{i}.json").read_text()) for i in range(2)]
    assert receipts[0] == receipts[1]  # the second found the first one's folder and reused it
    assert stamps.verify_folders([root / "extracted"], progress=False)[0] == []
    assert not list(root.glob(".extracted.*"))


def test_manifest_lists_every_prepared_file(server: src.Server, tmp_path: Path) -> None:
    _, prepared = _run_recipe("minigo", server, tmp_path, **src.EXTRA["minigo"])
    listed = set(read_manifest(prepared))
    on_disk = {p.relative_to(prepared).as_posix() for p in prepared.rglob("*") if p.is_file()}
    assert listed == on_disk - {MANIFEST, steps.MADE_BY}


def test_data_choices_are_taken_out_of_the_benchmark_blocks(tmp_path: Path) -> None:
    config = {"benchmarks": {"resnet": {"data": "recipe", "lr": 0.1}, "bert": {"data": {"path": str(tmp_path)}},
                             "ssd": {"data": {"classes": 3}}, "dlrm": {"data": "generated"}, "minigo": None}}
    rest, choices = recipe.split_choices(config)
    assert rest["benchmarks"]["resnet"] == {"lr": 0.1} and rest["benchmarks"]["ssd"] == {"data": {"classes": 3}}
    assert choices["resnet"].kind == "recipe" and choices["bert"] == recipe.Choice("path", tmp_path.resolve())
    assert choices["ssd"].kind == choices["dlrm"].kind == "generated"
    with pytest.raises(recipe.RecipeError, match=r"benchmarks\.resnet\.data: 'download' is not one of"):
        recipe.split_choices({"benchmarks": {"resnet": {"data": "download"}}})


@pytest.mark.parametrize("benchmark", sorted(src.MAKERS))
def test_every_benchmark_has_a_recipe_with_its_sources(benchmark: str) -> None:
    r = recipe.load(benchmark)
    assert r.sources and r.prepare["python"] in prepare.PREPARERS
    # RNN-T: our Python makes all that NVIDIA's scripts make (tests/test_dataset_rnnt.py), so it has no image step
    assert bool(r.prepare.get("image", {}).get("command")) == (benchmark != "rnnt")
    assert (len(r.manual) > 0) == (benchmark in ("resnet", "dlrm"))
