"""Our Criteo preprocessing against the DLRM reference's own code, run on the same tiny day files.

tests/fixtures/datasets/dlrm/reference_dlrm.py holds the reference's functions (facebookresearch/dlrm, MIT):
getCriteoAdData with its dictionaries and two-pass shuffle, and numpy_to_binary; run here as
dlrm_s_pytorch.py runs them (np.random.seed(123) first, --max-ind-range=40000000 --memory-map).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from mlrepro.datasets import criteo

FIXTURES = Path(__file__).parent / "fixtures" / "datasets" / "dlrm"


def _reference():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("reference_dlrm", FIXTURES / "reference_dlrm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _days(folder: Path, sizes: list[int]) -> list[Path]:
    """Criteo lines: label, 13 dense (missing, negative, large), 26 hex categoricals (missing, >= 40M, repeated)."""
    rng = np.random.default_rng(7)
    pool = [f"{v:08x}" for v in rng.integers(0, 2**32, 12)] + ["", "02625a00", "04c4b400"]  # 40M and 80M
    folder.mkdir(parents=True)
    paths = []
    for day, size in enumerate(sizes):
        lines = []
        for _ in range(size):
            dense = [str(v) if v > -3 else "" for v in rng.integers(-4, 3000, 13)]
            cats = [pool[i] for i in rng.integers(0, len(pool), 26)]
            lines.append("\t".join([str(rng.integers(0, 2)), *dense, *cats]) + "\n")
        path = folder / f"day_{day}"
        path.write_text("".join(lines))
        paths.append(path)
    return paths


def _reference_bins(days: list[Path], out: Path) -> None:
    ref = _reference()
    state = np.random.get_state()
    try:
        np.random.seed(criteo.SEED)
        prefix = str(days[0].parent / "day")
        ref.getCriteoAdData(prefix, "terabyte_processed", max_ind_range=criteo.MAX_IND_RANGE, sub_sample_rate=0.0,
                            days=len(days), data_split="train", randomize="total", criteo_kaggle=False,
                            memory_map=True)
    finally:
        np.random.set_state(state)
    out.mkdir()
    train = [f"{prefix}_{d}_reordered.npz" for d in range(len(days) - 1)]
    ref.numpy_to_binary(train, str(out / "train_data.bin"), "train")
    for split in ("test", "val"):
        ref.numpy_to_binary([f"{prefix}_{len(days) - 1}_reordered.npz"], str(out / f"{split}_data.bin"), split)


@pytest.mark.parametrize(("sizes", "chunk"), [([40, 25, 30, 21], 1 << 20), ([40, 25, 30, 21], 3), ([7, 5], 1 << 20)])
def test_binaries_byte_identical_to_the_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  sizes: list[int], chunk: int) -> None:
    # 40 + 25 + 30 samples drawn into buckets of 40, 25 and 30: the last draws hit full buckets and are redrawn
    monkeypatch.setattr(criteo, "_CHUNK", chunk)  # a small chunk: parsing and drawing cut into pieces
    days = _days(tmp_path / "raw", sizes)
    _reference_bins(days, tmp_path / "reference")
    criteo.prepare(criteo.day_files(tmp_path / "raw"), tmp_path / "ours")
    for name in ("train_data.bin", "test_data.bin", "val_data.bin"):
        theirs = (tmp_path / "reference" / name).read_bytes()
        assert (tmp_path / "ours" / name).read_bytes() == theirs, name
    train = np.fromfile(tmp_path / "ours" / "train_data.bin", dtype=np.int32).reshape(-1, 40)
    assert len(train) == sum(sizes[:-1]) and (train[:, 1:14] >= 0).all()
    dense = np.concatenate([criteo._parse_day(d, n, criteo.MAX_IND_RANGE)[:, 1:14].clip(0)
                            for d, n in zip(days[:-1], sizes[:-1], strict=True)])
    assert not np.array_equal(train[:, 1:14], dense)  # the training days really are shuffled ...
    assert np.array_equal(np.unique(train[:, 1:14], axis=0), np.unique(dense, axis=0))  # ... not changed
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["test_data.bin", "train_data.bin",
                                                                      "val_data.bin"]


def test_bad_day_files_named(tmp_path: Path) -> None:
    days = _days(tmp_path / "raw", [3, 3])
    days[1].write_text(days[1].read_text().replace("\t", " ", 1))
    with pytest.raises(criteo.CriteoError, match=r"day_1:1: 39 tab-separated fields"):
        criteo.prepare(days, tmp_path / "out")
    (tmp_path / "raw" / "day_3").write_text("")
    with pytest.raises(criteo.CriteoError, match=r"day_0 \.\.\. day_N without gaps"):
        criteo.day_files(tmp_path / "raw")
