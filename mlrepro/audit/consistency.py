"""Consistency checks that reviewers do by hand, beside the official checkers' verdict (docs/audit-checks.md).

None of these is in mlperf-logging. Each finding has a level that means something:

* ``fail``: a rule broken. A benchmark or division in the logs other than the folder's and the JSON's (the checks
  that ran depend on both); too few or too slow power readings; a result submitted twice; initialisation over the
  division's limit.
* ``warning``: a discrepancy that changes what the result claims: the node or accelerator count or the
  accelerator a log states differs from the system description; the log names another system of the same
  organisation; a status of another availability group.
* ``note``: provenance worth knowing that changes nothing: the vendor code's placeholder left in the logs;
  another organisation's name or system, as shared vendor code logs it.

Cosmetic differences are no finding (mlrepro/audit/platform_names.py): NVIDIA's ``<N>x`` prefix where N is the
system's node count, a display name beside a folder name, case, spaces and punctuation.

* ``submission``: each log's ``submission_*`` lines against the system description and the folder names
  (mlcommons/logging#241).
* ``power``: per power log (``power/result_N/node_*.txt``), the readings inside the measurement window:
  at least 60, and a median interval of at most 1 s (1 Hz, with 5% for the sampler's jitter).
* ``duplicate``: result files that appear twice in the round, as the same bytes or as the same run
  (equal run_start, run_stop and seeds): one run counted twice.
* ``init``: initialisation time (run_start - the first init_start) over the division's limit: 30 min
  closed; open 4 h (the rules text states 240 min for 2.0.0; before 2.0.0 a warning only).

A benchmark folder's findings are one per fact: the files a fact holds for are listed under it (:func:`grouped`).
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrepro.audit import discover, power
from mlrepro.audit.platform_names import Names, Platform, System, count, norm, parse, same_name, same_org, shown
from mlrepro.audit.runfile import FileCheck
from mlrepro.audit.summary import CONSISTENCY_LEVELS as LEVELS
from mlrepro.audit.summary import GROUPS, category

MIN_SAMPLES = 60
MAX_INTERVAL_S = 1.0
JITTER = 1.05  # a 1 Hz sampler whose median interval is up to 5% longer passes
INIT_LIMIT_MIN = {"closed": 30.0, "open": 240.0}
_OPEN_LIMIT_FROM = (2, 0, 0)  # the rules text's first round with the 4 h open limit


@dataclass(frozen=True)
class Finding:
    severity: str  # fail | warning | note
    check: str  # submission | power | duplicate | init
    file: str  # the result file's name ("" for the folder)
    message: str


def _group(status: Any) -> str:
    return GROUPS.get(category(status), norm(status))


def submission(system: System, benchmark: str, desc: dict[str, Any], name: str, rec: FileCheck,
               names: Names) -> list[Finding]:
    """One log's submission_* lines against the system description, the folder names and the round's other
    systems (``names``)."""
    logged = rec.submission
    out: list[Finding] = []

    def add(severity: str, message: str) -> None:
        out.append(Finding(severity, "submission", name, message))

    if "submission_benchmark" in logged and norm(logged["submission_benchmark"]) != norm(benchmark):
        add("fail", f"submission_benchmark is {shown(logged['submission_benchmark'])}, the folder is {benchmark!r}")
    division = desc.get("division")
    if "submission_division" in logged and division is not None \
            and norm(logged["submission_division"]) != norm(division):
        add("fail", f"submission_division is {shown(logged['submission_division'])}, the system description's "
                    f"{shown(division)}")
    if "submission_org" in logged:
        org_said = logged["submission_org"]
        if parse(org_said).placeholder:
            add("note", f"submission_org is the vendor code's placeholder {shown(org_said)}")
        elif not same_org(org_said, desc.get("submitter"), system.org):
            add("note", f"submission_org is {shown(org_said)}, another organisation's name (the submitter is "
                        f"{shown(desc.get('submitter') or system.org)}): the logging code of another organisation")
    if "submission_status" in logged and desc.get("status") is not None \
            and _group(logged["submission_status"]) != _group(desc["status"]):
        add("warning", f"submission_status is {shown(logged['submission_status'])}, the system description's status "
                       f"{shown(desc['status'])}")
    if "submission_platform" in logged:
        for severity, message in platform(system, logged["submission_platform"], names):
            add(severity, message)
    for key, expected in (("number_of_nodes", system.nodes), ("accelerators_per_node", system.accelerators)):
        if key in logged and expected is not None and count(logged[key]) != expected:
            add("warning", f"the log states {key} {shown(logged[key])}, the system description {expected:g}")
    return out


def platform(system: System, said: Any, names: Names) -> list[tuple[str, str]]:
    """(level, message) of what a ``submission_platform`` says against the system it is filed under."""
    p = parse(said)
    where = f"submission_platform {shown(said)}"
    if p.placeholder:
        return [("note", f"{where} is the vendor code's placeholder")]
    out: list[tuple[str, str]] = []
    if p.nodes is not None and system.nodes is not None and p.nodes != system.nodes:
        out.append(("warning", f"{where} states {p.nodes} node(s), the system description {system.nodes:g}"))
    key = norm(p.rest)
    own = system.spellings()
    if key in own:
        return out
    other = names.other_system(system, key)
    if other is not None:
        out.append(("warning", f"{where} names {system.org}'s other system {other.folder} ({other.shape()}); "
                               f"this system is {system.shape()}"))
        return out
    out += _accelerators(system, p, where)
    if not any(same_name(key, o) for o in own):
        other_org = names.other_org(system, key)
        if other_org is not None:
            out.append(("note", f"{where} is what {other_org}'s logs or systems name: the logging code of "
                                f"another organisation"))
    return out


def _accelerators(system: System, p: Platform, where: str) -> list[tuple[str, str]]:
    """The accelerator counts and families a platform encodes against the system description's."""
    out = []
    per_node = system.accelerators
    total = None if per_node is None or system.nodes is None else per_node * system.nodes
    for family, n in p.accelerators.items():
        if per_node is not None and n not in (per_node, total):
            out.append(("warning", f"{where} encodes {n} {family.upper()} accelerators, the system description "
                                   f"{per_node:g} per node"))
    described = parse(system.model).families
    if p.families and described and not p.families & described:
        out.append(("warning", f"{where} names the accelerator {', '.join(sorted(f.upper() for f in p.families))}, "
                               f"the system description {shown(system.model)}"))
    return out


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


def grouped(findings: list[Finding], result_files: int) -> list[dict[str, Any]]:
    """One finding per fact, worst first: the findings with the same level, check and message as one entry
    naming the files it holds for (``of``: the folder's result files, for "10 of 10 result files")."""
    facts: dict[tuple[str, str, str], list[str]] = {}
    for f in findings:
        facts.setdefault((f.severity, f.check, f.message), []).append(f.file)
    order = sorted(facts, key=lambda k: LEVELS.index(k[0]))
    return [{"severity": sev, "check": check, "message": message, "files": [f for f in facts[sev, check, message] if f],
             "of": result_files} for sev, check, message in order]
