"""Criteo 1TB click logs -> DLRM's MLPerf binaries, byte for byte as the reference preprocessing writes them.

The reference (datasets.md section 8) is `dlrm_s_pytorch.py --data-set=terabyte --max-ind-range=40000000
--memory-map --mlperf-bin-loader`: after np.random.seed(123) (its --numpy-rand-seed) it runs
facebookresearch/dlrm@16bb7a4:data_utils.py getCriteoAdData, processCriteoAdData and concatCriteoAdData (memory
map: the two-pass Fisher-Yates-Rao shuffle, randomize='total', data_split='train'), then
facebookresearch/dlrm@0e980ba:data_loader_terabyte.py numpy_to_binary. Per sample: 40 int32, the label, 13 dense
features (negatives as 0) and 26 categorical ones (the hex value modulo 40M, then its index in the order values
were first seen, over the days in order). The last day is not shuffled; its first ceil(n/2) samples are the test
set, the rest validation. NVIDIA's names: train_data.bin, test_data.bin (and val_data.bin).

Same random draws, in the same order, on numpy's legacy MT19937 seeded with 123; one day is held in memory at a
time (as the reference does), the shuffle's buckets are memory-mapped files in a work folder.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np

from mlrepro.core.errors import MlreproError

MAX_IND_RANGE = 40_000_000  # --max-ind-range
SEED = 123  # dlrm_s_pytorch.py --numpy-rand-seed default
FIELDS = 40  # label, 13 dense, 26 categorical
_CHUNK = 1 << 20  # samples handled at once


class CriteoError(MlreproError, ValueError):
    pass


def day_files(folder: Path) -> list[Path]:
    """day_0 ... day_N-1 (gunzipped), in order; a gap is an error."""
    days = sorted((p for p in folder.iterdir() if re.fullmatch(r"day_\d+", p.name)),
                  key=lambda p: int(p.name.split("_")[1]))
    names = [p.name for p in days]
    if names != [f"day_{i}" for i in range(len(days))]:
        raise CriteoError(f"{folder}: the Criteo days must be day_0 ... day_N without gaps, found {names}")
    if len(days) < 2:
        raise CriteoError(f"{folder}: Criteo needs at least two days (training days and the last, held out)")
    return days


def _parse_day(path: Path, count: int, max_ind_range: int) -> np.ndarray:
    """data_utils.process_one_file: rows of (label, dense, categorical mod max_ind_range) as int32."""
    data = np.empty((count, FIELDS), dtype=np.int32)
    rows: list[list[int]] = []
    done = 0
    with path.open() as f:
        for n, line in enumerate(f, 1):
            fields = line.split("\t")
            if len(fields) != FIELDS:
                raise CriteoError(f"{path}:{n}: {len(fields)} tab-separated fields, a Criteo line has {FIELDS}")
            fields = ["0" if v in ("", "\n") else v for v in fields]  # missing values are 0
            try:
                rows.append([int(v) for v in fields[:14]] + [int(v, 16) % max_ind_range for v in fields[14:]])
            except ValueError as exc:
                raise CriteoError(f"{path}:{n}: {exc}") from exc
            if len(rows) == _CHUNK or n == count:
                block = np.asarray(rows, dtype=np.int64)
                if (np.abs(block[:, :14]) > np.iinfo(np.int32).max).any():
                    raise CriteoError(f"{path}: a label or dense value near line {n} does not fit in int32 (the "
                                      "reference stores int32)")
                if done + len(block) > count:
                    break
                data[done:done + len(block)] = block
                done += len(block)
                rows = []
    if done != count or rows:
        raise CriteoError(f"{path}: changed while it was read ({count} lines counted)")
    return data


class _Dictionaries:
    """getCriteoAdData's convertDicts: per column, each value's index in the order values were first seen."""

    def __init__(self) -> None:
        self.index: list[dict[int, int]] = [{} for _ in range(26)]
        self._lookup: list[tuple[np.ndarray, np.ndarray]] = []

    def see(self, cats: np.ndarray) -> None:
        for j, column in enumerate(cats.T):
            values, first = np.unique(column, return_index=True)
            seen = self.index[j]
            for v in values[np.argsort(first)].tolist():
                seen.setdefault(v, len(seen))

    def apply(self, cats: np.ndarray) -> np.ndarray:
        """Each value's index; every value must have been seen (all days are seen before the first apply)."""
        if not self._lookup:
            for seen in self.index:
                keys = np.fromiter(seen.keys(), dtype=np.int64, count=len(seen))  # in index order
                self._lookup.append((keys, np.argsort(keys)))
        out = np.empty_like(cats)
        for j, column in enumerate(cats.T):
            keys, order = self._lookup[j]
            out[:, j] = order[np.searchsorted(keys, column, sorter=order)]
        return out


def _buckets(rng: np.random.RandomState, size: int, room: list[int], buckets: int) -> np.ndarray:
    """concatCriteoAdData's first pass for one day: each sample's bucket, drawn uniformly, redrawn while full.

    Vectorised up to the first draw that hits a full bucket, then that one redrawn as the reference does (one
    scalar randint per retry), so the stream of draws is the reference's.
    """
    drawn = rng.randint(low=0, high=buckets, size=size)
    room = list(room)
    k = 0
    while k < size:
        rest = drawn[k:k + _CHUNK]
        onehot = rest[:, None] == np.arange(buckets)[None, :]
        over = np.cumsum(onehot, axis=0) > np.asarray(room)[None, :]
        bad = np.nonzero((over & onehot).any(axis=1))[0]
        stop = int(bad[0]) if bad.size else rest.size
        for p, count in enumerate(onehot[:stop].sum(axis=0).tolist()):
            room[p] -= count
        k += stop
        if k < size:
            p = int(drawn[k])
            while room[p] <= 0:
                p = int(rng.randint(low=0, high=buckets))
            drawn[k] = p
            room[p] -= 1
            k += 1
    return drawn


def prepare(days: list[Path], out: Path, max_ind_range: int = MAX_IND_RANGE, seed: int = SEED) -> None:
    """Write out/train_data.bin, test_data.bin and val_data.bin from the day files, as the reference does."""
    rng = np.random.RandomState(seed)
    counts = []
    for path in days:  # getCriteoAdData counts the lines first: the buckets' sizes
        with path.open("rb") as f:
            counts.append(sum(1 for _ in f))
    dictionaries = _Dictionaries()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".criteo-", dir=out.parent) as tmp:
        work = Path(tmp)
        parsed = []
        for i, path in enumerate(days):  # process_one_file per day, the dictionaries growing in file order
            data = _parse_day(path, counts[i], max_ind_range)
            dictionaries.see(data[:, 14:])
            np.save(work / f"parsed_{i}.npy", data)
            parsed.append(work / f"parsed_{i}.npy")
        n = len(days)
        inter = [np.lib.format.open_memmap(work / f"bucket_{j}.npy", mode="w+", dtype=np.int32,
                                           shape=(counts[j], FIELDS)) for j in range(n)]
        filled = [0] * n
        for i in range(n):  # processCriteoAdData, then the first pass of the shuffle
            data = np.load(parsed[i])
            data[:, 1:14] = np.maximum(data[:, 1:14], 0)
            data[:, 14:] = dictionaries.apply(data[:, 14:])
            if i < n - 1:
                room = [counts[j] - filled[j] for j in range(n - 1)]
                bucket = _buckets(rng, len(data), room, n - 1)
            else:  # the last day keeps its order, though its draws are still made
                rng.randint(low=0, high=n - 1, size=len(data))
                bucket = np.full(len(data), i)
            for j in range(n):
                rows = data[bucket == j]
                inter[j][filled[j]:filled[j] + len(rows)] = rows
                filled[j] += len(rows)
            (work / f"parsed_{i}.npy").unlink()
        tmp_train = out / ".train_data.bin.partial"
        with tmp_train.open("wb") as f:  # the second pass: each training bucket permuted
            for j in range(n - 1):
                f.write(np.ascontiguousarray(inter[j][rng.permutation(counts[j])]).tobytes())
        last = inter[n - 1]
        mid = -(-len(last) // 2)  # numpy_to_binary: int(np.ceil(n / 2.))
        for name, part in (("test_data.bin", last[:mid]), ("val_data.bin", last[mid:])):
            partial = out / f".{name}.partial"
            partial.write_bytes(np.ascontiguousarray(part).tobytes())
            partial.replace(out / name)
        tmp_train.replace(out / "train_data.bin")
        del inter, last
