"""The package checker's verdict on one organisation, from the per-file records.

``package_checker.check_training_package`` re-checks every file and, in 4.1.68, dies on several
inputs (a missing system JSON, closed dlrm in rulesets 1.x/2.x, a folder whose logs name no
benchmark). The same checks run here on the audit's data: the official system-description checker
on each JSON, the exact file counts, the olympic tolerance of non-compliant files, the official
seed checker fed with the parsed seeds, and the RCP decision of ``rcp``. Where the official tool
would crash, the verdict says so and the audit goes on.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlperf_logging.benchmark_meta import get_allowed_benchmarks, get_result_file_counts
from mlperf_logging.package_checker.seed_checker import SeedChecker
from mlperf_logging.system_desc_checker import system_desc_checker

from mlrepro.audit import rcp
from mlrepro.audit.discover import Org
from mlrepro.audit.runfile import FileCheck
from mlrepro.core import safe_read

_SEED_RULESETS = {"1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0", "5.1.0",
                  "6.0.0", "6.1.0"}


@dataclass
class PackageVerdict:
    passed: bool = True
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    official_crash: list[str] = field(default_factory=list)  # where package_checker itself dies
    # what each error names: {"system": folder or "", "benchmark": folder or "", "message": ...};
    # "" is the whole organisation (or the whole system)
    scoped: list[dict[str, str]] = field(default_factory=list)

    def error(self, msg: str, system: str = "", benchmark: str = "") -> None:
        self.passed = False
        self.errors.append(msg)
        self.scoped.append({"system": system, "benchmark": benchmark, "message": msg})


def errors_of(verdict: dict[str, Any], system: str, benchmark: str | None = None) -> list[str]:
    """The package checker's errors that concern a system (``benchmark`` None) or one benchmark folder.

    An error naming no system concerns all; one naming a system but no benchmark concerns all its
    benchmarks.
    """
    return [e["message"] for e in verdict.get("scoped", [])
            if e["system"] in ("", system) and (benchmark is None or e["benchmark"] in ("", benchmark))]


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _captured_logs() -> Iterator[_Collector]:
    """Collect what the official tools log at WARNING and above (their only way of saying why)."""
    collector = _Collector()
    root = logging.getLogger()
    root.addHandler(collector)
    try:
        yield collector
    finally:
        root.removeHandler(collector)


class _RecordedSeeds(SeedChecker):
    """The official seed checker, reading the seeds the audit already parsed."""

    def __init__(self, ruleset: str, records: dict[str, FileCheck]) -> None:
        super().__init__(ruleset)
        self._records = records

    def _get_seed_records(self, result_file: str) -> list[tuple[Any, Any, int]]:
        rec = self._records[result_file]
        if rec.seed_error:
            raise ValueError(rec.seed_error)
        return [(f, ln, s) for f, ln, s in rec.seeds]


def _bypass(params: Path, flag: str) -> bool:
    # package_checker compares readlines() items, newline included, with the bare flag: only a
    # last line without a newline can set it. Reproduced as is.
    return params.is_file() and flag in params.read_text(encoding="latin-1").splitlines(keepends=True)


def recorded_bypass(system: Path, benchmark: Path, flag: str) -> bool:
    """Whether the package records ``flag`` for a benchmark folder (its system's or its own params)."""
    return _bypass(system / "package_checker_params", flag) or _bypass(benchmark / "package_checker_params", flag)


def _system_descs(org: Org, usage: str, ruleset: str, verdict: PackageVerdict) -> None:
    for path in org.system_jsons:
        try:
            with _captured_logs() as logs:
                valid = system_desc_checker.check_system_desc(str(path), usage, ruleset)[0]
        except Exception as e:
            verdict.error(f"systems/{path.name}: the system description cannot be checked "
                          f"({type(e).__name__}: {e}).", system=path.stem)
            verdict.official_crash.append(f"system_desc_checker on systems/{path.name}: {type(e).__name__}: {e}")
            continue
        if not valid:
            why = "; ".join(r.getMessage().strip() for r in logs.records) or "invalid"
            verdict.error(f"systems/{path.name}: {why}", system=path.stem)


def check_package(org: Org, records: dict[str, FileCheck], usage: str, ruleset: str) -> PackageVerdict:
    verdict = PackageVerdict()
    for problem in org.problems:
        verdict.error(problem)
    if ruleset in _SEED_RULESETS:
        _system_descs(org, usage, ruleset, verdict)
    allowed = get_allowed_benchmarks(usage, ruleset)
    counts = get_result_file_counts(usage)
    for system in org.systems:
        sys_rcp_bypass = _bypass(system.path / "package_checker_params", "rcp-bypass")
        sys_seed_bypass = _bypass(system.path / "package_checker_params", "seed-checker-bypass")
        for bdir in system.benchmarks:
            where = f"{system.name}/{bdir.name}"
            division = _division(org, system.name, verdict)
            scope = {"system": system.name, "benchmark": bdir.name}
            if bdir.name not in allowed:
                verdict.warnings.append(f"{where}: skipping benchmark {bdir.name!r}, which the {ruleset} ruleset "
                                        "does not have.")
                continue
            files = [str(f) for f in bdir.result_files]
            params = bdir.path / "package_checker_params"
            if len(files) != counts[bdir.name]:
                verdict.error(f"{where}: incorrect number of result files: found {len(files)}, expected "
                              f"{counts[bdir.name]}.", **scope)
            extra = [n for n in bdir.other_files if n != "package_checker_params"]
            if extra:
                verdict.warnings.append(f"{where}: files not named result_*.txt: {', '.join(extra)}")
            unreadable = [f for f in files if f not in records]
            for f in unreadable:
                verdict.error(f"{where}: {Path(f).name} cannot be read.", **scope)
            failing = [Path(f).stem for f in files if f in records and not records[f].valid]
            tolerated = 4 if bdir.name == "unet3d" else 1
            if failing and len(failing) <= tolerated:
                verdict.warnings.append(f"{where}: {len(failing)} file(s) do not comply ({', '.join(failing)}), "
                                        "accepted under olympic scoring.")
            elif failing:
                verdict.error(f"{where}: {len(failing)} files do not comply ({', '.join(failing)}); the folder "
                              "cannot be accepted.", **scope)
            if unreadable or division != "closed":
                continue
            present = {f: records[f] for f in files}
            if ruleset in _SEED_RULESETS and not (sys_seed_bypass or _bypass(params, "seed-checker-bypass")):
                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        seed_errors = _RecordedSeeds(ruleset, present)._assert_unique_seed_per_run(files)
                except TypeError as e:  # a seed record that cannot be compared (e.g. a list as file name)
                    seed_errors = [f"the seed checker fails on these logs: {e}"]
                    verdict.official_crash.append(f"seed_checker on {where}: TypeError: {e}")
                verdict.warnings.extend(f"{where}: {w.message}" for w in caught)
                if seed_errors:
                    verdict.error(f"{where}: seed checker failed: " + " ".join(seed_errors), **scope)
            if rcp.applies(ruleset, division, bdir.name) and files:
                result = rcp.check(list(present.values()), usage, ruleset,
                                   bypass=sys_rcp_bypass or _bypass(params, "rcp-bypass"))
                if result.error:
                    verdict.warnings.append(f"{where}: the RCP check cannot run: {result.message}.")
                    verdict.official_crash.append(f"rcp_checker on {where}: {result.error}")
                elif not result.passed:
                    verdict.error(f"{where}: RCP test failed: {result.message}.", **scope)
    return verdict


def _division(org: Org, system: str, verdict: PackageVerdict) -> str:
    """The division the package checker reads from the system JSON ('' when it would crash)."""
    path = org.path / "systems" / f"{system}.json"
    try:
        contents = safe_read.read_json(path, org.path)
        return "closed" if contents["division"] == "closed" else ""
    except Exception as e:
        msg = f"{system}: cannot read the division from systems/{system}.json ({type(e).__name__}: {e})."
        if msg not in verdict.errors:
            verdict.error(msg, system=system)
            verdict.official_crash.append(f"package_checker on {system}: {type(e).__name__}: {e}")
        return ""
