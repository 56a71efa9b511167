"""Scores per system and benchmark by ``result_summarizer``'s rules, from the per-file records.

The summarizer scores a benchmark folder as the olympic mean of the runs whose file is compliant
and timed (``mlrepro.score.olympic_mean`` is its arithmetic), times ``scaling.json``'s factor when
the package has one. It reads that file before its own RCP check rewrites it, so the factor is the
one present in the package, never one the audit computes. The system columns use the
summarizer's own helpers, so names and counts print as it prints them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlperf_logging.result_summarizer import result_summarizer as rs

from mlrepro.audit import rcp
from mlrepro.audit.discover import BenchmarkDir, Org, SystemDir
from mlrepro.audit.runfile import FileCheck
from mlrepro.rulesets import allowed_benchmarks
from mlrepro.score import olympic_mean


@dataclass
class SystemDesc:
    """A system JSON as the summarizer reads it; ``specs`` is None when it would skip the system."""

    path: Path
    desc: dict[str, Any] | None
    specs: dict[str, Any] | None
    problem: str = ""  # why the JSON is missing, unreadable or lacks a field


@dataclass
class BenchmarkScore:
    benchmark: str  # the folder name, with the summarizer's alias (mask -> maskrcnn)
    folder: str
    known: bool  # whether the ruleset has this benchmark
    minutes: float | None
    runs: int
    scored_runs: int
    reason: str  # why there is no score
    scaling_factor: float
    rcp: rcp.RcpVerdict | None
    gbs: Any = None
    samples_to_converge: float | None = None
    problems: list[str] = field(default_factory=list)


def benchmark_alias(name: str) -> str:
    return str(rs._benchmark_alias(name))


def load_system_desc(org: Org, system: SystemDir) -> SystemDesc:
    path = org.path / "systems" / f"{system.name}.json"
    if not path.is_file():
        return SystemDesc(path, None, None, f"Missing system description systems/{system.name}.json.")
    try:
        desc = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return SystemDesc(path, None, None, f"Invalid system description systems/{system.name}.json: "
                                            f"{type(e).__name__}: {e}")
    if not isinstance(desc, dict):
        return SystemDesc(path, None, None, f"systems/{system.name}.json is not a JSON object.")
    try:
        specs = _specs(desc, system)
    except Exception as e:  # FieldError, or a count that is not a number
        msg = str(e).removeprefix("ERROR: ")
        return SystemDesc(path, desc, None, f"systems/{system.name}.json: {msg}")
    return SystemDesc(path, desc, specs)


def _specs(desc: dict[str, Any], system: SystemDir) -> dict[str, Any]:
    """The summarizer's columns before the scores, in its order of checks."""
    private = system.path / "privateid.json"
    desc = dict(desc, private_id=json.loads(private.read_text())["private_id"] if private.is_file() else "")
    get = rs._assert_in_desc_and_return
    return {
        "division": get(desc, "division"),
        "private_id": get(desc, "private_id"),
        "availability": get(desc, "status"),
        "submitter": get(desc, "submitter"),
        "system": get(desc, "system_name", query=rs._pretty_system_name),
        "host_processor_model_name": get(desc, "host_processor_model_name"),
        "number_of_nodes": get(desc, "number_of_nodes"),
        "host_processors_count": get(desc, ["host_processor_core_count", "host_processors_per_node", "number_of_nodes"],
                                     query=lambda d: int(d["host_processors_per_node"]) * int(d["number_of_nodes"])),
        "accelerator_model_name": get(desc, "accelerator_model_name", query=rs._pretty_accelerator_model_name),
        "accelerators_count": get(desc, ["accelerators_per_node", "number_of_nodes"],
                                  query=lambda d: int(d["accelerators_per_node"]) * int(d["number_of_nodes"])),
        "framework": get(desc, "framework", query=rs._pretty_framework),
        "notes": get(desc, ["hw_notes", "sw_notes"],
                     query=lambda d: ";".join(s for s in (d["hw_notes"], d["sw_notes"]) if s)),
    }


def scaling_factor(folder: Path) -> tuple[float, str]:
    path = folder / "scaling.json"
    if not path.is_file():
        return 1.0, ""
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["scaling_factor"]), ""
    except Exception as e:
        return 1.0, f"scaling.json is unreadable ({type(e).__name__}: {e}); the score is left unscaled"


def score_benchmark(bdir: BenchmarkDir, records: dict[str, FileCheck], division: str, usage: str,
                    ruleset: str) -> BenchmarkScore:
    name = benchmark_alias(bdir.name)
    known = name in allowed_benchmarks(ruleset, usage)
    recs = [records.get(str(f)) for f in bdir.result_files]
    minutes = [r.scored_minutes if r is not None else None for r in recs]
    factor, problem = scaling_factor(bdir.path)
    score = olympic_mean(name, minutes, factor)
    reason = score.reason
    if not known:
        reason = f"the {ruleset} ruleset has no benchmark {name!r}"
    elif not bdir.result_files:
        reason = "no result_*.txt files"
    result = BenchmarkScore(name, bdir.name, known, score.minutes if known else None, len(minutes),
                            score.converged, reason, factor, None, problems=[problem] if problem else [])
    present = [r for r in recs if r is not None]
    if known and division == "closed" and len(present) == len(recs) and present:
        # the summarizer's closed-division extras: RCP label, global batch size, mean epochs
        result.rcp = rcp.check(present, usage, ruleset)
        try:
            bs, _, _ = rcp.submission_epochs(present)
            result.gbs = bs
            result.samples_to_converge = rcp.mean_epochs(present)
        except ValueError as e:
            result.problems.append(str(e))
    return result
