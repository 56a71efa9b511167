"""What a result log says, for the comparison: seed, time to train, evals, hyperparameters, submission.

Read with bounds (mlrepro.core.safe_read): a package's result may be a symlink to /dev/zero, a FIFO, a
huge file or an MLLOG line nested 100,000 deep; each becomes the log's ``error``, never a hang or a crash.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.core import mllog_reader, safe_read

# Logged before run_start, but not hyperparameters: identity, seeding and set-up events.
_NOT_HYPERPARAMETERS = {"cache_clear", "init_start", "init_stop", "seed", "weights_initialization",
                        "submission_benchmark", "submission_org", "submission_platform", "submission_division",
                        "submission_status", "submission_poc_name", "submission_poc_email"}


@dataclass
class LoggedRun:
    file: str
    seed: Any = None
    minutes: float | None = None  # time to train; None unless the run converged
    status: str | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    evals: list[list[Any]] = field(default_factory=list)  # [epoch or samples, value]
    epochs: float | None = None  # epochs (or samples) to converge: the last eval's epoch_num
    submission: dict[str, Any] = field(default_factory=dict)
    init_minutes: float | None = None  # run_start - the first init_start (untimed initialisation)
    start_ms: float | None = None  # run_start and run_stop as logged (the log's own clock: self-reported)
    stop_ms: float | None = None
    error: str | None = None


def read_log(path: Path, root: Path | None = None) -> LoggedRun:
    """The run ``path`` logs (a regular file inside ``root`` when given); what cannot be read is its error."""
    log = LoggedRun(str(path))
    start = stop = init = None
    try:
        text = safe_read.read_text(path, root)
        for e in mllog_reader.parse(text.splitlines(), str(path)):
            key, value, meta = e.get("key"), e.get("value"), e.get("metadata") or {}
            if not isinstance(meta, dict):
                raise ValueError(f"{path}: {key}: metadata is not an object")
            if key == "init_start" and init is None:
                init = e.get("time_ms")
            if key == "run_start":
                start = e.get("time_ms")
            elif key == "run_stop":
                stop, log.status = e.get("time_ms"), str(meta.get("status"))
            elif key == "seed":
                log.seed = value
            elif str(key).startswith("submission_"):
                log.submission[str(key).removeprefix("submission_")] = value
            elif key == "eval_accuracy":
                log.evals.append([meta.get("epoch_num", meta.get("samples_count")), value])
            elif start is None and e.get("event_type") == "POINT_IN_TIME" and key not in _NOT_HYPERPARAMETERS:
                log.hyperparameters[str(key)] = value
    except (OSError, ValueError) as e:  # UnsafeInput, an MLLOG line that is not JSON, a failing disk
        log.error = str(e)[:1000]
        return log
    if start is not None and stop is not None and log.status == "success":
        try:
            log.minutes = (float(stop) - float(start)) / 60_000
            log.start_ms, log.stop_ms = float(start), float(stop)
        except (TypeError, ValueError):
            log.error = f"{path}: run_start or run_stop has a time_ms that is not a number"
            return log
        log.epochs = log.evals[-1][0] if log.evals else None
    if start is not None and init is not None:
        # a time that is not a number: the run has no initialisation time; its time to train stands
        with contextlib.suppress(TypeError, ValueError):
            log.init_minutes = (float(start) - float(init)) / 60_000
    return log
