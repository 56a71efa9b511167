"""Scores per system and benchmark by ``result_summarizer``'s rules, from the per-file records.

The summarizer scores a benchmark folder as the olympic mean of the runs whose file is compliant
and timed (``mlrepro.core.olympic.olympic_mean`` is its arithmetic), times ``scaling.json``'s factor. It
reads that file *before* its own RCP check (``set_scaling=True``) rewrites it, so a first run on a
pristine copy prints unscaled scores and a second run the published, scaled ones. The audit gives
the published score at once: the raw olympic mean times the factor the RCP check of the chosen
ruleset leaves in ``scaling.json`` (computed from a scratch folder, see ``rcp``), which is the
package's own factor where the check leaves the file alone; a submitted factor that the check
changes or deletes is flagged, and resolved as the summarizer's second run resolves it. The system
columns use the summarizer's own helpers, so names and counts print as it prints them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlperf_logging.result_summarizer import result_summarizer as rs

from mlrepro.audit import power, rcp
from mlrepro.audit.discover import BenchmarkDir, Org, SystemDir, read_entry
from mlrepro.audit.runfile import FileCheck
from mlrepro.core.olympic import max_dropped, olympic_mean
from mlrepro.core.rulesets import allowed_benchmarks


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
    scaling_factor: float  # the factor ``minutes`` carries: the submitted one, else the computed one
    rcp: rcp.RcpVerdict | None
    raw_minutes: float | None = None  # the olympic mean before scaling
    submitted_factor: float | None = None  # scaling.json in the package, if any
    computed_factor: float | None = None  # what the RCP check leaves in scaling.json; None: it leaves it alone
    factor_disagrees: bool = False  # the check would change or delete the submitted factor
    gbs: Any = None
    samples_to_converge: float | None = None
    problems: list[str] = field(default_factory=list)
    has_power: bool = False  # the folder has power logs (power/result_N/)
    energy_j: float | None = None  # energy to train in joules, as result_summarizer's "<benchmark>:Energy"
    energy_problem: str = ""  # why a folder with power logs has no energy score


def benchmark_alias(name: str) -> str:
    return str(rs._benchmark_alias(name))


def load_system_desc(org: Org, system: SystemDir) -> SystemDesc:
    path = org.path / "systems" / f"{system.name}.json"
    if not path.is_file():
        return SystemDesc(path, None, None, f"Missing system description systems/{system.name}.json.")
    try:  # read_entry: never through a symlink out of the organisation's folder
        desc = json.loads(read_entry(path, org.path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:  # EntryRejected is an OSError
        return SystemDesc(path, None, None, f"Invalid system description systems/{system.name}.json: "
                                            f"{type(e).__name__}: {e}")
    if not isinstance(desc, dict):
        return SystemDesc(path, None, None, f"systems/{system.name}.json is not a JSON object.")
    try:
        specs = _specs(desc, system)
    except Exception as e:  # FieldError, or a count that is not a number
        msg = str(e).removeprefix("ERROR: ")
        try:  # counts written as "1.0": whole numbers all the same, which the summarizer's int() refuses
            specs = _specs(desc, system, _whole)
        except Exception:
            return SystemDesc(path, desc, None, f"systems/{system.name}.json: {msg}")
        return SystemDesc(path, desc, specs, f"systems/{system.name}.json: a count is not written as an integer "
                                             f"(the official result_summarizer stops here: {msg}); read as a number")
    return SystemDesc(path, desc, specs)


def _whole(value: Any) -> int:
    """A count such as "8", 8, "1.0" or 1.0; anything not a whole number raises ValueError."""
    number = float(value)
    if not number.is_integer():
        raise ValueError(f"{value!r} is not a whole number")
    return int(number)


# The system columns ``_specs`` gives, in its order; every row has them, whichever release's CSV columns it prints.
SPEC_COLUMNS = ("division", "private_id", "availability", "submitter", "system", "host_processor_model_name",
                "number_of_nodes", "host_processors_count", "accelerator_model_name", "accelerators_count",
                "framework", "notes")


def _specs(desc: dict[str, Any], system: SystemDir, count: Any = int) -> dict[str, Any]:
    """The summarizer's columns before the scores, in its order of checks (``count``: its int())."""
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
        "host_processors_count": get(
            desc, ["host_processor_core_count", "host_processors_per_node", "number_of_nodes"],
            query=lambda d: count(d["host_processors_per_node"]) * count(d["number_of_nodes"])),
        "accelerator_model_name": get(desc, "accelerator_model_name", query=rs._pretty_accelerator_model_name),
        "accelerators_count": get(desc, ["accelerators_per_node", "number_of_nodes"],
                                  query=lambda d: count(d["accelerators_per_node"]) * count(d["number_of_nodes"])),
        "framework": get(desc, "framework", query=rs._pretty_framework),
        "notes": get(desc, ["hw_notes", "sw_notes"],
                     query=lambda d: ";".join(s for s in (d["hw_notes"], d["sw_notes"]) if s)),
    }


_MAX_SCALING_BYTES = 64 * 1024


def submitted_factor(folder: Path) -> tuple[float | None, str]:
    """The factor of the package's own ``scaling.json`` (None without one), and why it is unusable."""
    path = folder / "scaling.json"
    if path.is_symlink():
        return None, "scaling.json is a symbolic link; it is not applied"
    if not path.is_file():
        return None, ""
    try:
        with path.open("rb") as f:  # a factor is a few bytes: never read a huge file whole
            factor = float(json.loads(f.read(_MAX_SCALING_BYTES).decode("utf-8"))["scaling_factor"])
    except Exception as e:
        return None, f"scaling.json is unreadable ({type(e).__name__}: {e}); it is not applied"
    if not math.isfinite(factor) or factor <= 0:
        return None, f"scaling.json holds an impossible factor ({factor}); it is not applied"
    return factor, ""


def score_benchmark(bdir: BenchmarkDir, records: dict[str, FileCheck], division: str, usage: str,
                    ruleset: str, installed_release: bool = True) -> BenchmarkScore:
    """The published score of one benchmark folder; ``installed_release``: compute the RCP factor and the
    energy with the installed release's functions (``rcp``, ``power``); False where another release judges
    and its own summarizer gives them (``apply_official``)."""
    name = benchmark_alias(bdir.name)
    known = name in allowed_benchmarks(ruleset, usage)
    recs = [records.get(str(f)) for f in bdir.result_files]
    minutes = [r.scored_minutes if r is not None else None for r in recs]
    submitted, problem = submitted_factor(bdir.path)
    raw = olympic_mean(name, minutes)
    reason = raw.reason
    if not known:
        reason = f"the {ruleset} ruleset has no benchmark {name!r}"
    elif not bdir.result_files:
        reason = "no result_*.txt files"
    result = BenchmarkScore(name, bdir.name, known, None, len(minutes), raw.converged, reason, 1.0, None,
                            raw_minutes=raw.minutes if known else None, submitted_factor=submitted,
                            problems=[problem] if problem else [])
    present = [r for r in recs if r is not None]
    if installed_release and known and division == "closed" and len(present) == len(recs) and present:
        # the summarizer's closed-division extras: RCP label, global batch size, mean epochs
        result.rcp = rcp.check(present, usage, ruleset)
        result.computed_factor = result.rcp.written_factor
        try:
            bs, _, _ = rcp.submission_epochs(present)
            result.gbs = bs
            result.samples_to_converge = rcp.mean_epochs(present)
        except ValueError as e:
            result.problems.append(str(e))
    computed = result.computed_factor
    # As the official summarizer's second run on a fresh copy: it reads what its first run's RCP check
    # left in scaling.json (computed), and the package's own file only where the check leaves it alone.
    result.scaling_factor = computed if computed is not None else submitted if submitted is not None else 1.0
    if submitted is not None and computed is not None and not math.isclose(submitted, computed, rel_tol=1e-9):
        result.factor_disagrees = True
        what = "deletes it" if computed == 1.0 else f"computes {computed!r}"
        result.problems.append(f"the package's scaling.json holds {submitted!r}; the RCP check of {ruleset} {what}, "
                               f"so the official summarizer (its second run) and this audit apply {computed!r}")
    if result.raw_minutes is not None:
        result.minutes = result.raw_minutes * result.scaling_factor
    result.has_power = known and power.has_power(bdir.path)
    if result.has_power and installed_release:
        _energy(result, bdir, recs, ruleset)
    return result


def _energy(result: BenchmarkScore, bdir: BenchmarkDir, recs: list[FileCheck | None], ruleset: str) -> None:
    """The folder's energy score: the runs the summarizer scores, each with its power logs."""
    scored = [(f, r) for f, r in zip(bdir.result_files, recs, strict=True)
              if r is not None and r.scored_minutes is not None and r.run_start_ms is not None
              and r.run_stop_ms is not None]
    energies = [power.run_energy(bdir.path, f, r.run_stop_ms - r.run_start_ms, ruleset, bdir.path)  # type: ignore[operator]
                for f, r in scored]
    result.energy_j, result.energy_problem = power.folder_energy(
        [r.scored_minutes for _, r in scored], energies, len(recs) - len(scored),  # type: ignore[misc]
        max_dropped(result.benchmark), result.scaling_factor)


def apply_official(score: BenchmarkScore, official: Any, system: str, judged_by: str) -> None:
    """Replace ``score``'s figures by the judging release's own summarizer (``official.SummarizerScores``):
    the second run's score is the published one, the first run's the raw one, their ratio the factor."""
    if official.crash:
        score.minutes = score.raw_minutes = None
        score.reason = f"the official result_summarizer of mlperf-logging {judged_by} crashes: {official.crash}"
        return
    published = official.published.get(system, {}).get(score.benchmark)
    raw = official.raw.get(system, {}).get(score.benchmark)
    score.energy_j = official.energy.get(system, {}).get(score.benchmark)
    score.energy_problem = "" if score.energy_j is not None or not score.has_power else (
        f"the official result_summarizer of mlperf-logging {judged_by} gives no energy")
    score.minutes, score.raw_minutes = published, raw
    if published is not None:
        score.reason = ""
    score.scaling_factor = published / raw if published is not None and raw else 1.0
    if published is None and score.known and not score.reason:
        score.reason = f"the official result_summarizer of mlperf-logging {judged_by} gives no score"
