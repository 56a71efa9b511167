"""The system under test as LoadGen sees it: a long-lived worker answering queries from a queue, and one
LoadGen test over an in-memory QSL. The timed run and its calibration runs (mlrepro/inference/calibrate.py)
both go through here, so calibration measures the path the timed run takes."""

from __future__ import annotations

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


class QueueSUT:
    """A long-lived worker answers queries from a queue (LoadGen's issue callback must not block, and a
    thread per call crashes Offline runs, mlcommons/inference#1337). Offline's one huge query is cut into
    batches of ``batch`` samples."""

    def __init__(self, predict: Predict, batch: int) -> None:
        import mlperf_loadgen as lg

        self.lg, self.predict, self.batch = lg, predict, batch
        self.queue: queue.Queue[list[Any] | None] = queue.Queue()
        self.worker = threading.Thread(target=self._work, daemon=True)
        self.worker.start()
        self.handle = lg.ConstructSUT(self.issue, self.flush)

    def issue(self, samples: list[Any]) -> None:
        for i in range(0, len(samples), self.batch):
            self.queue.put(samples[i : i + self.batch])

    def flush(self) -> None:
        pass

    def _work(self) -> None:
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


def start_test(predict: Predict, count: int, test_settings: Any, out_dir: Path, batch: int = BATCH,
               audit_config: Path | None = None) -> None:
    """One LoadGen test over a QSL of ``count`` in-memory samples; its logs land in ``out_dir`` (which must
    exist). LoadGen may run several tests in one process; only FromConfig must be called once. ``audit_config``:
    an audit test's settings, which LoadGen applies over ``test_settings`` (by default it reads audit.config from
    the working folder)."""
    import mlperf_loadgen as lg

    log = lg.LogSettings()
    log.log_output.outdir = str(out_dir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    sut = QueueSUT(predict, batch)
    qsl = lg.ConstructQSL(count, count, lambda idx: None, lambda idx: None)  # the samples live in memory
    try:
        if audit_config is None:
            lg.StartTestWithLogSettings(sut.handle, qsl, test_settings, log)
        else:
            lg.StartTestWithLogSettings(sut.handle, qsl, test_settings, log, str(audit_config))
    finally:
        lg.DestroyQSL(qsl)
        sut.close()
