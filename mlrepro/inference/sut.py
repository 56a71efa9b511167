"""The system under test as LoadGen sees it: a long-lived worker answering queries from a queue, and one
LoadGen test over an in-memory QSL. The timed run and its calibration runs (mlrepro/inference/calibrate.py)
both go through here, so calibration measures the path the timed run takes."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# One response per index, as the bytes LoadGen logs: a 2-D array (row i answers indices[i]) or, where responses
# differ in size (detections, transcripts), a list of 1-D arrays.
Predict = Callable[[np.ndarray], "np.ndarray | list[np.ndarray]"]
BATCH = 64  # samples per model call: Offline's one query is cut into batches, Server's queued queries joined
# A model's first calls on a batch size it has not served yet are slow (measured, after 5 calls of 64: a first call of
# 8 samples took 2.9 ms, the next ones 1.0 ms; torch prepares its kernels per input shape). A timed run is preceded by
# this many calls of each size its queries take, so that no timed query pays for that.
WARM_UP_CALLS = 3


class QueueSUT:
    """A long-lived worker answers queries from a queue (LoadGen's issue callback must not block, and a
    thread per call crashes Offline runs, mlcommons/inference#1337). Offline's one huge query is cut into
    batches of ``batch`` samples."""

    def __init__(self, predict: Predict, batch: int, warm: list[np.ndarray] | None = None) -> None:
        import mlperf_loadgen as lg

        self.lg, self.predict, self.batch = lg, predict, batch
        self.queue: queue.Queue[list[Any] | None] = queue.Queue()
        self.worker = threading.Thread(target=self._work, args=(warm or [],), daemon=True)
        self.ready, self.failed = threading.Event(), None
        self.worker.start()
        self.ready.wait()
        if self.failed is not None:  # the model failed in its warm-up: no worker serves
            raise self.failed
        self.handle = lg.ConstructSUT(self.issue, self.flush)

    def issue(self, samples: list[Any]) -> None:
        for i in range(0, len(samples), self.batch):
            self.queue.put(samples[i : i + self.batch])

    def flush(self) -> None:
        pass

    def _work(self, warm: list[np.ndarray]) -> None:
        try:  # on the thread that serves: a thread's first model calls are slow too (3.7 ms against 2.0)
            for indices in warm:
                self.predict(indices)
        except BaseException as e:
            self.failed = e
            return
        finally:
            self.ready.set()
        while (samples := self.queue.get()) is not None:
            while len(samples) < self.batch:  # queries that queued up meanwhile go in the same batch (Server)
                try:
                    more = self.queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.queue.put(None)
                    break
                samples = samples + more
            # kept referenced until QuerySamplesComplete returns: LoadGen copies what it logs from these buffers
            out = self.predict(np.array([s.index for s in samples], dtype=np.int64))
            rows = [np.ascontiguousarray(r) for r in out]
            responses = [self.lg.QuerySampleResponse(s.id, r.ctypes.data, r.nbytes)
                         for s, r in zip(samples, rows, strict=True)]
            self.lg.QuerySamplesComplete(responses)

    def close(self) -> None:
        self.queue.put(None)
        self.worker.join()
        self.lg.DestroySUT(self.handle)


def pin(threads: int) -> set[int]:
    """Serve a timed run on ``threads`` CPUs of those this process may use, from now on: this thread and every thread
    it starts (the worker, LoadGen's, torch's) inherit them; the CPUs that have served the fewest device interrupts
    (:func:`device_interrupts`: the disk's all land on one CPU of a two-core VM). Unpinned, a query's threads wake
    on whichever CPU is free, at whatever that CPU does then, and the performance run and its audits, which compare
    a MultiStream run's p99 (about its 20th worst query of 2,048), measure apart: beside four busy processes and a
    disk writer at real-time priority, p99 1.24 to 1.90 ms over 8 unpinned runs, 1.22 to 2.41 ms over 8 runs pinned
    to the disk's CPU, 1.17 to 1.45 ms over 8 pinned to the other (docs/submitter.md). Returns them."""
    allowed = sorted(os.sched_getaffinity(0))
    counts = device_interrupts()
    cpus = set(sorted(allowed, key=lambda cpu: (counts.get(cpu, 0), -cpu))[:max(1, threads)])
    os.sched_setaffinity(0, cpus)
    return cpus


def device_interrupts(path: Path = Path("/proc/interrupts")) -> dict[int, int]:
    """CPU -> the device interrupts it has served since boot (/proc/interrupts' numbered lines); {} where unreadable."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    header = lines[0].split() if lines else []
    cpus = [int(name[3:]) for name in header if name.startswith("CPU") and name[3:].isdigit()]
    counts = dict.fromkeys(cpus, 0)
    for line in lines[1:]:
        label, _, rest = line.partition(":")
        if not label.strip().isdigit():
            continue
        for cpu, field in zip(cpus, rest.split(), strict=False):
            if field.isdigit():
                counts[cpu] += int(field)
    return counts


def query_sizes(scenario: str, test_settings: Any) -> tuple[int, ...]:
    """The batch sizes the worker calls the model with in ``scenario``: SingleStream one sample, MultiStream its
    samples per query, Offline full batches (its one remainder aside), Server any number of queued queries joined."""
    return {"SingleStream": (1,), "MultiStream": (int(test_settings.multi_stream_samples_per_query),),
            "Offline": (BATCH,), "Server": tuple(range(1, BATCH + 1))}[scenario]


def warm_batches(count: int, sizes: tuple[int, ...], same: int | None = None) -> list[np.ndarray]:
    """The model calls a timed run is preceded by, on the thread that serves it (QueueSUT): WARM_UP_CALLS of each
    batch size of ``sizes``, on the samples ``0, 1, ...`` or, ``same`` given, that sample alone (TEST04's repeated
    one: a SUT caching answers then has none cached for the samples the test issues). The performance run and its
    audit tests are warmed alike: the audits compare their timing with it (after its calibration alone, a first
    MultiStream query of an audit took 4.7 ms against the performance run's worst 2.2 ms, the round's score of a
    shortened run being its worst; warmed on another thread, v2.0's TEST04-A, one Offline query of 256 samples,
    served 21k samples/s against its TEST04-B's 26k to 28k, 3 tries of 3)."""
    return [np.full(size, same, dtype=np.int64) if same is not None else np.arange(size, dtype=np.int64) % count
            for size in sizes for _ in range(WARM_UP_CALLS)]


def start_test(predict: Predict, count: int, test_settings: Any, out_dir: Path, batch: int = BATCH,
               audit_config: Path | None = None, warm: list[np.ndarray] | None = None) -> None:
    """One LoadGen test over a QSL of ``count`` in-memory samples; its logs land in ``out_dir`` (which must
    exist). LoadGen may run several tests in one process; only FromConfig must be called once. ``audit_config``:
    an audit test's settings, which LoadGen applies over ``test_settings`` (by default it reads audit.config from
    the working folder). ``warm``: model calls made on the serving thread before the test starts (warm_batches)."""
    import mlperf_loadgen as lg

    log = lg.LogSettings()
    log.log_output.outdir = str(out_dir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    sut = QueueSUT(predict, batch, warm)
    qsl = lg.ConstructQSL(count, count, lambda idx: None, lambda idx: None)  # the samples live in memory
    try:
        if audit_config is None:
            lg.StartTestWithLogSettings(sut.handle, qsl, test_settings, log)
        else:
            lg.StartTestWithLogSettings(sut.handle, qsl, test_settings, log, str(audit_config))
    finally:
        lg.DestroyQSL(qsl)
        sut.close()
