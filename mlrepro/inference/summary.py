"""LoadGen's own result files read into records: ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt``.

The summary is the file every published round keeps, so the audit and the pipeline's checks read the
same fields: scenario, mode, the scenario's metric as LoadGen printed it, its VALID/INVALID verdict
and the constraint lines under it. Anything that is not a LoadGen summary raises :class:`SummaryError`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.core.errors import MlreproError

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")

# The metric line each scenario leads with, across LoadGen versions (v1.1: "90th percentile latency";
# v2.0 and later "90.0th"; Server printed "Scheduled" up to v4.0, "Completed" after).
_METRICS: dict[str, list[tuple[str, str]]] = {
    "SingleStream": [(r"^9\d(?:\.\d+)?th percentile latency \(ns\)\s*:", "ns")],
    "MultiStream": [(r"^9\d(?:\.\d+)?th percentile latency \(ns\)\s*:", "ns"), (r"^Samples per query\s*:", "samples")],
    "Server": [(r"^Scheduled samples per second\s*:", "samples/s"),
               (r"^Completed samples per second\s*:", "samples/s")],
    "Offline": [(r"^Samples per second\s*:", "samples/s")],
}
_LINE = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")


class SummaryError(MlreproError, ValueError):
    pass


@dataclass
class Summary:
    scenario: str
    mode: str
    metric: float | None  # the scenario's result as printed (ns for latencies, samples/s for throughput)
    metric_name: str | None
    units: str | None
    valid: bool | None  # "Result is : VALID" / "INVALID"; None when the line is missing (accuracy runs)
    constraints: dict[str, bool] = field(default_factory=dict)  # "Min duration satisfied": True, ...
    stats: dict[str, str] = field(default_factory=dict)  # every other "key : value" line
    errors_reported: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "mode": self.mode, "metric": self.metric, "metric_name": self.metric_name,
                "units": self.units, "valid": self.valid, "constraints": self.constraints,
                "errors_reported": self.errors_reported}


# Far above any real metric (samples per second, latencies in ns, samples per query); a number a package
# states beyond it (1e308) is not a measurement.
MAX_METRIC = 1e15


class OutOfRange(MlreproError, ValueError):
    """A number that is one, but no measurement: not finite, negative, or beyond MAX_METRIC."""


def number(text: str) -> float:
    """The number a LoadGen line states: finite, not negative, at most MAX_METRIC; ValueError otherwise (inf,
    nan, 1e400, -5 are not measurements)."""
    parts = text.replace(",", "").split()
    if not parts:
        raise ValueError("no number")
    value = float(parts[0])
    if not math.isfinite(value) or value < 0 or value > MAX_METRIC:
        raise OutOfRange(f"{parts[0][:40]!r} is not a finite number from 0 to {MAX_METRIC:g}")
    return value


def parse(text: str, source: str = "summary") -> Summary:
    """Parse one summary; ``source`` names the file in errors."""
    if "MLPerf Results Summary" not in text:
        raise SummaryError(f"{source}: not a LoadGen summary (no 'MLPerf Results Summary' header)")
    fields: dict[str, str] = {}
    lines = [ln.rstrip() for ln in text.splitlines()]
    for ln in lines:
        m = _LINE.match(ln)
        if m and not ln.startswith("="):
            fields.setdefault(m.group(1), m.group(2))
    scenario, mode = fields.get("Scenario"), fields.get("Mode")
    if scenario not in SCENARIOS:
        raise SummaryError(f"{source}: no known 'Scenario :' line (found {scenario!r}); truncated or not from LoadGen")
    if not mode:
        raise SummaryError(f"{source}: no 'Mode :' line; truncated or not from LoadGen")
    metric = metric_name = units = None
    # The metric leads, above "Result is"; the same names recur under "Additional Stats".
    head = lines[: next((i for i, ln in enumerate(lines) if ln.startswith("Result is")), len(lines))]
    for pattern, unit in _METRICS[scenario]:
        hit = next((ln for ln in head if re.match(pattern, ln.strip())), None)
        if hit:
            metric_name = hit.split(":", 1)[0].strip()
            try:
                metric = number(hit.split(":", 1)[1])
            except OutOfRange as e:
                raise SummaryError(f"{source}: metric line {hit.strip()[:80]!r}: {e}; not a measurement") from None
            except (IndexError, ValueError):
                raise SummaryError(f"{source}: metric line {hit.strip()[:80]!r} has no number; truncated?") from None
            units = unit
            break
    verdict = fields.get("Result is")
    valid = None if verdict is None else verdict.strip().upper() == "VALID"
    if mode.startswith("Performance") and (verdict is None or metric is None):
        raise SummaryError(f"{source}: performance summary without "
                           f"{'a result metric' if metric is None else 'a Result is line'}; truncated?")
    constraints = {k: v.strip().lower() == "yes" for k, v in fields.items()
                   if k.endswith("satisfied") and v.strip().lower() in ("yes", "no")}
    return Summary(scenario, mode, metric, metric_name, units, valid, constraints, fields,
                   errors_reported="errors encountered during test" in text and "No errors" not in text)


MAX_BYTES = 1 << 20  # a LoadGen summary is a few KiB; more is not a summary


def read(path: Path) -> Summary:
    if path.is_symlink() or not path.is_file():
        raise SummaryError(f"{path}: not a regular file")
    try:
        with path.open("rb") as f:
            text = f.read(MAX_BYTES).decode("utf-8", errors="replace")
    except OSError as e:
        raise SummaryError(f"{path}: unreadable ({e.strerror})") from None
    return parse(text, str(path))


def detail(path: Path) -> dict[str, Any]:
    """``:::MLLOG`` records of a detail log as key -> value (the last one wins); ``__errors__`` lists the
    records LoadGen marked as errors (``error_*`` keys or ``metadata.is_error``), which fail a run."""
    values: dict[str, Any] = {}
    errors: list[str] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith(":::MLLOG"):
            continue
        try:
            rec = json.loads(line[len(":::MLLOG"):])
        except json.JSONDecodeError:
            continue
        key = str(rec.get("key", ""))
        values[key] = rec.get("value")
        if key.startswith("error") or (rec.get("metadata") or {}).get("is_error"):
            errors.append(f"{key}: {rec.get('value')}")
    values["__errors__"] = errors
    return values
