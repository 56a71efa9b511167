"""Tiny files in each real dataset format, a local HTTP server for them, and recipes pointing at it."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pickle
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from mlrepro.core.minis import mini_dir


class Server:
    """Serves ``files`` (name -> bytes) on 127.0.0.1 with Range support; ``drop[name] = n`` cuts the next
    response to that file after n bytes; ``requests`` logs (name, Range header)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.drop: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                name = self.path.lstrip("/")
                server.requests.append((name, self.headers.get("Range")))
                if name not in server.files:
                    self.send_error(404)
                    return
                body, start = server.files[name], 0
                if rng := self.headers.get("Range"):
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    if start >= len(body):
                        self.send_response(416)
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                cut = server.drop.pop(name, None)
                self.wfile.write(body[start:cut] if cut is not None else body[start:])
                if cut is not None:
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def publish(self, name: str, data: bytes) -> str:
        self.files[name] = data
        return f"{self.url}/{name}"


@contextmanager
def serving() -> Iterator[Server]:
    server = Server()
    server.thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


def _tar(members: dict[str, bytes], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


# A 2x2 baseline JPEG (made once with Pillow, which the tests do not need); a comment segment makes each unique.
_JPEG = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123251d"
    "283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffdb004301111212181518"
    "2f1a1a2f63423842636363636363636363636363636363636363636363636363636363636363636363636363636363636363"
    "6363636363636363ffc00011080002000203012200021101031101ffc4001f00000105010101010101000000000000000001"
    "02030405060708090a0bffc400b5100002010303020403050504040000017d01020300041105122131410613516107227114"
    "328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748494a53545556"
    "5758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5"
    "b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffc4001f010003"
    "0101010101010101010000000000000102030405060708090a0bffc400b51100020102040403040705040400010277000102"
    "031104052131061241510761711322328108144291a1b1c109233352f0156272d10a162434e125f11718191a262728292a35"
    "363738393a434445464748494a535455565758595a636465666768696a737475767778797a82838485868788898a92939495"
    "969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9ea"
    "f2f3f4f5f6f7f8f9faffda000c03010002110311003f00c9a28a2b03e9cfffd9"
)


def jpeg(seed: int) -> bytes:
    comment = f"image {seed}".encode()
    return _JPEG[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + _JPEG[2:]


WNIDS = ["n01440764", "n01443537"]


def imagenet() -> dict[str, bytes]:
    train = _tar({f"{w}.tar": _tar({f"{w}_{i}.JPEG": jpeg(10 * c + i) for i in range(2)})
                  for c, w in enumerate(WNIDS)})
    val_names = [f"ILSVRC2012_val_{i:08d}.JPEG" for i in range(1, 5)]
    val = _tar({n: jpeg(100 + i) for i, n in enumerate(val_names)})
    valprep = "".join(f"mkdir -p {w}\n" for w in WNIDS) + "".join(
        f"mv {n} {WNIDS[i % 2]}/\n" for i, n in enumerate(val_names))
    return {"ILSVRC2012_img_train.tar": train, "ILSVRC2012_img_val.tar": val, "valprep.sh": valprep.encode()}


def coco_json(split: str, n: int) -> bytes:
    images = [{"id": i + 1, "file_name": f"{i + 1:012d}.jpg", "height": 8, "width": 8, "license": 1,
               "coco_url": "x", "date_captured": "x", "flickr_url": "x"} for i in range(n)]
    annotations = [{"id": 10 + i, "image_id": i + 1, "category_id": 1, "bbox": [1.0, 1.0, 4.0, 4.0], "area": 16.0,
                    "iscrowd": 0, "segmentation": [[1, 1, 5, 1, 5, 5, 1, 5]]} for i in range(n)]
    return json.dumps({"info": {}, "licenses": [], "images": images, "annotations": annotations,
                       "categories": [{"id": 1, "name": "thing", "supercategory": "x"}]}).encode()


def coco(backbone: str) -> dict[str, bytes]:
    import torch

    files = {
        "train2017.zip": _zip({f"train2017/{i + 1:012d}.jpg": jpeg(i) for i in range(2)}),
        "val2017.zip": _zip({f"val2017/{i + 1:012d}.jpg": jpeg(50 + i) for i in range(1)}),
        "annotations_trainval2017.zip": _zip({"annotations/instances_train2017.json": coco_json("train", 2),
                                              "annotations/instances_val2017.json": coco_json("val", 1)}),
    }
    if backbone == "R-50.pkl":
        files[backbone] = pickle.dumps({"conv1_w": np.ones((2, 3, 1, 1), np.float32)})
    else:  # a ResNet-34 state dict in torchvision's names
        state = {"conv1.weight": torch.ones(2, 3, 1, 1), "bn1.weight": torch.ones(2), "bn1.bias": torch.zeros(2),
                 "layer1.0.conv1.weight": torch.ones(2, 2, 1, 1), "layer2.1.bn2.bias": torch.zeros(2),
                 "layer2.0.downsample.0.weight": torch.ones(2, 2, 1, 1), "layer4.0.conv1.weight": torch.ones(1),
                 "fc.weight": torch.ones(1, 2)}
        buf = io.BytesIO()
        torch.save(state, buf)
        files[backbone] = buf.getvalue()
    return files


def _flac(audio: np.ndarray) -> bytes:
    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, audio, 16000, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


# dev-clean: a tone, tones just under and over pysox's silence threshold (a mean norm of 0.001 in sox's stat),
# and zeros; odd lengths, so that durations round in soxi's %f
LIBRISPEECH_DEV = [("HELLO WORLD", 1601, 3000), ("DON'T STOP", 2203, 51), ("SOFT", 1201, 53), ("QUIET", 803, 0)]


def librispeech() -> dict[str, bytes]:
    """dev-clean and train-clean-100 as OpenSLR 12 packs them: LibriSpeech/<set>/<speaker>/<chapter>/ with FLAC
    and <speaker>-<chapter>.trans.txt. The train transcripts are long enough (8 lines of ~4,000 characters, the
    sentencepiece trainer skips longer ones) for the reference's vocabulary of 1023 pieces."""
    rng = np.random.default_rng(5)
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ'"))
    words = ["".join(rng.choice(letters[:26], int(rng.integers(2, 10)))) for _ in range(2000)]
    words[:2] = ["HELLO", "DON'T"]
    archives = {}
    for split, speaker, chapter, utterances in [
            ("dev-clean", 84, 121123, [(text, (np.sin(np.arange(n) / 10) * amp).astype(np.int16))
                                       for text, n, amp in LIBRISPEECH_DEV]),
            ("train-clean-100", 103, 1240, [(" ".join(rng.choice(words, 600)),
                                             rng.integers(-2000, 2000, 300 + 37 * i).astype(np.int16))
                                            for i in range(8)])]:
        folder = f"LibriSpeech/{split}/{speaker}/{chapter}"
        members = {f"{folder}/{speaker}-{chapter}-{i:04d}.flac": _flac(audio)
                   for i, (_, audio) in enumerate(utterances)}
        members[f"{folder}/{speaker}-{chapter}.trans.txt"] = "".join(
            f"{speaker}-{chapter}-{i:04d} {text}\n" for i, (text, _) in enumerate(utterances)).encode()
        archives[f"{split}.tar.gz"] = _tar(members, "w:gz")
    return archives


def kits19() -> dict[str, bytes]:
    import nibabel

    files = {}
    for case in range(2):
        rng = np.random.default_rng(case)
        for name, array in (("imaging", rng.normal(100, 80, (6, 8, 8))),
                            ("segmentation", rng.integers(0, 3, (6, 8, 8)).astype(np.uint8))):
            image = nibabel.Nifti1Image(array, np.diag([3.2, 2.4, 2.4, 1.0]))
            image.header.set_zooms((3.2, 2.4, 2.4))
            files[f"case_{case:05d}/{name}.nii.gz"] = gzip.compress(image.to_bytes(), mtime=0)
    return files


def minigo() -> dict[str, bytes]:
    # the target: a tiny MiniGo checkpoint saved by real TensorFlow (tests/fixtures/datasets/minigo, its
    # architecture in EXTRA); its graph, target.meta, is downloaded but not read (the graph is rebuilt from code)
    target = Path(__file__).parent / "fixtures" / "datasets" / "minigo" / "target"
    return {"checkpoint.tar.gz": _tar({"mlperf07/work_dir/model.ckpt-9383.index": b"index",
                                       "mlperf07/work_dir/model.ckpt-9383.data-00000-of-00001": b"data"}, "w:gz"),
            **{f.name: f.read_bytes() for f in sorted(target.glob("target.*"))}, "target.meta": b"MetaGraphDef"}


BERT_FIXTURES = Path(__file__).parent / "fixtures" / "datasets" / "bert"
# three HDF5 shards instead of 4320, and NVIDIA's checksums of what its own scripts make of the fixtures
BERT_PREPARE = {"python": "bert", "shards": 3,
                "chk": {"hdf5/training-3/hdf5_3_shards_varlength": "3_shards_varlength.chk",
                        "hdf5/eval_varlength": "eval_varlength.chk"}}


def bert() -> dict[str, bytes]:
    """Text shards and a vocabulary, a BERT-shaped TF1 checkpoint saved by TensorFlow and NVIDIA's eval .chk
    for them (fixtures/datasets/bert/make_fixtures.py)."""
    shards = {f"results4/{p.name}": p.read_bytes() for p in sorted((BERT_FIXTURES / "results4").iterdir())}
    names = ("bert_config.json", "vocab.txt", "model.ckpt-28252.data-00000-of-00001", "model.ckpt-28252.index",
             "eval_varlength.chk")
    return {**{n: (BERT_FIXTURES / n).read_bytes() for n in names}, "model.ckpt-28252.meta": b"meta",
            "results_text.tar.gz": _tar(shards, "w:gz")}


def criteo_day(seed: int, rows: int = 6) -> bytes:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(rows):
        dense = [str(v) if v >= 0 else "" for v in rng.integers(-1, 20, 13)]
        cats = [f"{v:08x}" if v else "" for v in rng.integers(0, 5, 26)]
        lines.append("\t".join([str(rng.integers(0, 2)), *dense, *cats]))
    return gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)


def criteo() -> dict[str, bytes]:
    return {f"day_{i}.gz": criteo_day(i) for i in range(2)}


# recipe settings a benchmark's tiny files need (recipe_for's ``extra``)
EXTRA: dict[str, dict[str, Any]] = {"bert": {"prepare": BERT_PREPARE}, "minigo": {"prepare": {
    "python": "minigo", "architecture": {"conv_width": 8, "fc_width": 8, "trunk_layers": 2, "board_size": 9}}}}

MAKERS = {"resnet": imagenet, "bert": bert, "maskrcnn": lambda: coco("R-50.pkl"),
          "ssd": lambda: coco("resnet34-333f7ec4.pth"), "rnnt": librispeech,
          "unet3d": kits19, "minigo": minigo, "dlrm": criteo}


def recipe_for(benchmark: str, server: Server, folder: Path, files: dict[str, bytes],
                extra: dict[str, Any] | None = None) -> Path:
    """The benchmark's real recipe with its sources cut to ``files``: URLs on ``server``, the checksums of the
    test's files in each published algorithm (none where the real recipe publishes none)."""
    raw = yaml.safe_load((mini_dir(benchmark) / "dataset.yaml").read_text())
    sources = []
    for entry in raw["sources"]:
        expanded = ([{k: v.format(i=i) if isinstance(v, str) else v for k, v in entry.items() if k != "range"}
                     for i in range(*entry["range"])] if "range" in entry else [entry])
        for e in expanded:
            if e["file"] not in files:
                continue
            e = {**e, "size": len(files[e["file"]])}
            if e.get("hash"):
                algorithm = e["hash"].partition(":")[0]
                e["hash"] = f"{algorithm}:{hashlib.new(algorithm, files[e['file']]).hexdigest()}"
            if e.get("url"):
                e["url"] = server.publish(f"{benchmark}/{e['file']}", files[e["file"]])
            sources.append(e)
    raw["sources"] = sources
    names = {s["file"] for s in sources}
    raw["extract"] = [s for s in raw["extract"] if (s.get("archive") or s.get("gunzip")) in names]
    raw["sizes"] = {}
    if raw["prepare"].get("published_md5") not in files:  # the test has no published checksums to check
        raw["prepare"].pop("published_md5", None)
    raw.update(extra or {})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{benchmark}.dataset.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
