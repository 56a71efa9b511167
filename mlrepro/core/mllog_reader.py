"""Reading MLPerf result logs (``:::MLLOG {json}`` lines)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mlrepro.core.safe_read import loads_json

PREFIX = ":::MLLOG "


def parse(lines: Iterable[str], source: str) -> Iterator[dict[str, Any]]:
    """The events of ``:::MLLOG`` lines; a line that is not JSON, or nested too deep (a hostile log), raises
    ValueError naming ``source`` and the line."""
    for number, line in enumerate(lines, 1):
        _, sep, payload = line.partition(PREFIX)
        if sep:
            event = loads_json(payload, f"{source}, line {number}")
            if not isinstance(event, dict):
                raise ValueError(f"{source}, line {number}: an MLLOG event is a JSON object, "
                                 f"not {type(event).__name__}")
            yield event


def events(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        yield from parse(f, str(path))


def run_window(path: Path) -> tuple[int, int]:
    """``time_ms`` of run_start and run_stop: time to train is their difference."""
    start = stop = None
    for e in events(path):
        if e["key"] == "run_start":
            start = int(e["time_ms"])
        elif e["key"] == "run_stop":
            stop = int(e["time_ms"])
    if start is None or stop is None:
        raise ValueError(f"{path}: no {'run_start' if start is None else 'run_stop'} event")
    return start, stop


def run_status(path: Path) -> str | None:
    for e in events(path):
        if e["key"] == "run_stop":
            return str((e.get("metadata") or {}).get("status"))
    return None


def run_minutes(result: Path) -> tuple[float | None, str | None]:
    """(time to train in minutes, run_stop status) of one result file; minutes is None unless it converged."""
    start, stop = run_window(result)
    status = run_status(result)
    return ((stop - start) / 60 / 1000 if status == "success" else None), status


def mllog_lines(text: str) -> list[str]:
    """The ``:::MLLOG`` lines of a run's whole output, from the prefix on (launchers put rank tags before it)."""
    out = []
    for line in text.splitlines():
        i = line.find(PREFIX.rstrip())
        if i >= 0:
            out.append(line[i:] + "\n")
    return out


def run_summary(path: Path) -> dict[str, Any]:
    """What run.json says of a run, from its result file alone (any implementation's).

    status, epochs, the metric curve (eval_accuracy per epoch, ms after run_start), time to train,
    seed; ValueError naming the file when it has no run_start or run_stop.
    """
    start, stop = run_window(path)
    seed = status = None
    epochs = 0
    metrics: list[dict[str, Any]] = []
    for e in events(path):
        md = e.get("metadata") or {}
        key = e["key"]
        if key == "seed":
            seed = e["value"]
        elif key == "run_stop":
            status = md.get("status")
        elif key == "eval_accuracy":
            epoch = md.get("epoch_num")
            metrics.append({"epoch": epoch, "value": e["value"], "time_ms": int(e["time_ms"]) - start})
        if key in ("epoch_stop", "eval_accuracy") and isinstance(md.get("epoch_num"), (int, float)):
            epochs = max(epochs, int(md["epoch_num"]))
        elif key == "block_stop" and isinstance(md.get("first_epoch_num"), (int, float)):
            epochs = max(epochs, int(md["first_epoch_num"]) + int(md.get("epoch_count") or 1) - 1)
    return {"seed": seed, "status": str(status), "epochs": epochs, "time_to_train_ms": stop - start,
            "final_metric": metrics[-1]["value"] if metrics else None, "metrics": metrics,
            "run_start_ms": start, "run_stop_ms": stop}
