"""A SUT changed under the served resnet, for tests/test_inference.py: the inference_run job (mlrepro/inference/run.py
``job``, the real run module) with the model's ``predict`` replaced as its param ``changed`` says: "noop" answers at
once, a number sleeps that many seconds per model call (a call answers one query, or Server's queued queries together,
or one of Offline's batches) before the model answers. The entry function of a job run in a process of its own
(tests/loadgen_warm_job.py ENTRY), which alone sees the change."""

from __future__ import annotations

import time

import numpy as np

from mlrepro.core.job import Job
from mlrepro.inference import run, serve


def job(job: Job) -> None:
    kind = str(job.params["changed"])
    served = serve.ADAPTERS["resnet"]

    class Changed(served):  # type: ignore[valid-type,misc]
        def predict(self, indices: np.ndarray) -> np.ndarray:
            if kind == "noop":
                return np.zeros((len(indices), 1), dtype=np.int32)
            time.sleep(float(kind))
            return super().predict(indices)

    serve.ADAPTERS["resnet"] = Changed
    run.job(job)
