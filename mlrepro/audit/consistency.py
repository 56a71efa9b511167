"""Consistency checks that reviewers do by hand, beside the official checkers' verdict (docs/audit-checks.md).

None of these is in mlperf-logging; each finding is a ``fail`` where the rules require what it checks and a
``warning`` where they only expect it:

* ``submission``: each log's ``submission_*`` lines against the system description and the folder names
  (mlcommons/logging#241). A benchmark or division other than the folder's and the JSON's is a fail (the
  checks that ran depend on both); organisation, status (by availability group), platform and logged
  node or accelerator counts that differ are warnings.
* ``power``: per power log (``power/result_N/node_*.txt``), the readings inside the measurement window:
  at least 60, and a median interval of at most 1 s (1 Hz, with 5% for the sampler's jitter); fails.
* ``duplicate``: result files that appear twice in the round, as the same bytes or as the same run
  (equal run_start, run_stop and seeds): one run counted twice; fails.
* ``init``: initialisation time (run_start - the first init_start) over the division's limit: 30 min
  closed; open 4 h (the rules text states 240 min for 2.0.0; before 2.0.0 a warning only).
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlrepro.audit import discover, power
from mlrepro.audit.runfile import FileCheck
from mlrepro.audit.summary import GROUPS, category

MIN_SAMPLES = 60
MAX_INTERVAL_S = 1.0
JITTER = 1.05  # a 1 Hz sampler whose median interval is up to 5% longer passes
INIT_LIMIT_MIN = {"closed": 30.0, "open": 240.0}
_OPEN_LIMIT_FROM = (2, 0, 0)  # the rules text's first round with the 4 h open limit


@dataclass(frozen=True)
class Finding:
    severity: str  # fail | warning
    check: str  # submission | power | duplicate | init
    file: str  # the result file's name ("" for the folder)
    message: str


def _norm(value: Any) -> str:
    return re.sub(r"[\s_-]+", " ", str(value)).strip().lower()


def _group(status: Any) -> str:
    return GROUPS.get(category(status), _norm(status))


def submission(org: str, system: str, benchmark: str, desc: dict[str, Any], name: str,
               rec: FileCheck) -> list[Finding]:
    """One log's submission_* lines against the system description and the folder names."""
    logged = rec.submission
    out = []

    def differs(key: str, severity: str, *expected: Any) -> None:
        if key in logged and expected and all(_norm(logged[key]) != _norm(e) for e in expected if e is not None):
            wanted = " or ".join(repr(e) for e in dict.fromkeys(expected) if e is not None)
            out.append(Finding(severity, "submission", name, f"{key} is {logged[key]!r}, the package says {wanted}"))

    differs("submission_benchmark", "fail", benchmark)
    differs("submission_division", "fail", desc.get("division"))
    differs("submission_org", "warning", desc.get("submitter"), org)
    differs("submission_platform", "warning", desc.get("system_name"), system)
    if "submission_status" in logged and desc.get("status") is not None \
            and _group(logged["submission_status"]) != _group(desc["status"]):
        out.append(Finding("warning", "submission", name, f"submission_status is {logged['submission_status']!r}, "
                           f"the system description's status {desc['status']!r}"))
    for key in ("number_of_nodes", "accelerators_per_node"):
        if key in logged and desc.get(key) is not None and _count(logged[key]) != _count(desc[key]):
            out.append(Finding("warning", "submission", name,
                               f"the log states {key} {logged[key]!r}, the system description {desc[key]!r}"))
    return out


def _count(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def init_time(division: str, ruleset: str, name: str, rec: FileCheck) -> list[Finding]:
    """Initialisation time against the division's limit."""
    limit = INIT_LIMIT_MIN.get(division)
    if limit is None or rec.init_start_ms is None or rec.run_start_ms is None:
        return []
    minutes = (rec.run_start_ms - rec.init_start_ms) / 60_000
    if minutes <= limit:
        return []
    early_open = division == "open" and tuple(int(p) for p in ruleset.split(".")[:3]) < _OPEN_LIMIT_FROM
    return [Finding("warning" if early_open else "fail", "init", name,
                    f"initialisation took {minutes:.1f} min (run_start - init_start), over the {division} "
                    f"division's {limit:.0f} min" + (" (the rules text states it from 2.0.0)" if early_open else ""))]


def power_logs(bdir: discover.BenchmarkDir, root: Path, ruleset: str, max_bytes: int | None) -> list[Finding]:
    """Sampling rate and sample count of every node power log's measurement window."""
    out: list[Finding] = []
    if not power.has_power(bdir.path):
        return out
    for path in sorted((bdir.path / power.POWER).glob("result_*/node_*.txt")):
        where = path.relative_to(bdir.path).as_posix()
        try:
            loglines = power._loglines(path, root, ruleset, max_bytes)
        except (OSError, ValueError) as e:  # EntryRejected is an OSError; its verdict is the energy's
            out.append(Finding("fail", "power", where, f"cannot be read: {e}"))
            continue
        out += _window(where, loglines)
    return out


def _window(where: str, loglines: list[Any]) -> list[Finding]:
    times = {}
    readings = []
    for ll in loglines:
        try:
            t = float(ll.timestamp)
        except (TypeError, ValueError):
            continue
        if ll.key in ("power_measurement_start", "power_measurement_stop"):
            times.setdefault(ll.key, t)
        elif ll.key == "power_reading":
            readings.append(t)
    start = times.get("power_measurement_start", min(readings, default=0.0))
    stop = times.get("power_measurement_stop", max(readings, default=0.0))
    inside = sorted(t for t in readings if start <= t <= stop)
    out = []
    if len(inside) < MIN_SAMPLES:
        out.append(Finding("fail", "power", where, f"{len(inside)} power readings in the measurement window "
                           f"({(stop - start) / 1000:.1f} s), fewer than the rules' {MIN_SAMPLES}"))
    if len(inside) >= 2:
        interval = statistics.median(b - a for a, b in itertools.pairwise(inside)) / 1000
        if interval > MAX_INTERVAL_S * JITTER:
            out.append(Finding("fail", "power", where, f"power readings every {interval:.2f} s (median interval): "
                               f"{1 / interval if interval else float('inf'):.2f} Hz, below the rules' 1 Hz"))
    return out


def duplicates(files: dict[str, tuple[str, FileCheck]]) -> dict[str, list[Finding]]:
    """Result path -> its duplicate findings, across the round; ``files``: path -> (its place, record)."""
    by_bytes: dict[str, list[str]] = defaultdict(list)
    by_run: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for path, (_, rec) in files.items():
        by_bytes[rec.sha256].append(path)
        if rec.run_start_ms is not None and rec.run_stop_ms is not None:
            by_run[(rec.run_start_ms, rec.run_stop_ms, tuple(s[2] for s in rec.seeds))].append(path)
    out: dict[str, list[Finding]] = defaultdict(list)
    for what, groups in (("the same bytes as", by_bytes), ("the same run (run_start, run_stop and seeds) as", by_run)):
        for paths in groups.values():
            for path in paths:
                digest = files[path][1].sha256
                # a byte-identical twin is named once, as the same bytes
                others = [files[p][0] for p in paths if p != path and (what == "the same bytes as"
                                                                      or files[p][1].sha256 != digest)]
                if others:
                    out[path].append(Finding("fail", "duplicate", Path(path).name, f"{what} {', '.join(others[:5])}"
                                             + (f" and {len(others) - 5} more" if len(others) > 5 else "")))
    return out


def place(path: str, root: Path) -> str:
    """A result file as findings name it: org/system/benchmark/file, relative to the audited root."""
    p = Path(path)
    try:
        return p.relative_to(root).as_posix() if not discover.is_org(root) else f"{root.name}/{p.relative_to(root)}"
    except ValueError:
        return p.name


def to_dicts(findings: list[Finding]) -> list[dict[str, Any]]:
    return [asdict(f) for f in findings]
