"""The vendor flow's jobs and the make command each runs, from ``inference.vendor`` and the folder's round (flow.py).

One unit per (system, benchmark, scenario, mode): performance, accuracy and each audit test the round requires of the
benchmark. Its steps, each ``{"job", "target", "where", "argv"}``: the jobs it needs (image, build, the benchmark's
data, the (benchmark, scenario)'s engines, shared by every unit that needs them), its own run, and the round's
post-run targets that carry its result to the package (staging, for an audit its compliance staging, truncation,
export, check, pack). Each argv is the folder's own ``make TARGET VAR=value ...``, run in the folder's working copy,
on the host or in the container as the round's recipes say (flow.Flow.where).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.core import safe_read
from mlrepro.inference.vendor import nvconfig
from mlrepro.inference.vendor.flow import RUN, Flow

MODES = ("performance", "accuracy")
DATA_STEPS = ("download_model", "download_data", "preprocess_data")


@dataclass(frozen=True)
class Spec:
    """``inference.vendor`` as the rules hand it to a job (config/schema.yaml documents each key)."""

    code: Path
    system_id: str
    benchmarks: tuple[str, ...]
    scenarios: tuple[str, ...]
    submitter: str
    run_args: tuple[str, ...] = ()
    audits: dict[str, list[str]] = field(default_factory=dict)  # benchmark -> its audit tests; left out: the code's
    custom_definition: Path | None = None
    image: str | None = None
    log_root: str = "build/logs/mlrepro"  # relative to the folder's working copy: staging reads build/logs

    @classmethod
    def from_config(cls, vendor: dict[str, Any], submitter: str) -> Spec:
        return cls(code=Path(vendor["code"]), system_id=str(vendor["system_id"]),
                   benchmarks=tuple(vendor.get("benchmarks") or ()), scenarios=tuple(vendor.get("scenarios") or ()),
                   submitter=str(vendor.get("submitter") or submitter), run_args=tuple(vendor.get("run_args") or ()),
                   audits={k: list(v) for k, v in (vendor.get("audits") or {}).items()},
                   custom_definition=Path(vendor["custom_definition"]) if vendor.get("custom_definition") else None,
                   image=vendor.get("image"))


@dataclass(frozen=True)
class Unit:
    benchmark: str
    scenario: str
    mode: str

    @property
    def key(self) -> str:
        return f"{self.benchmark}/{self.scenario}/{self.mode}"


class Planner:
    """The units and steps of one spec, its folder read once (Makefiles and configs, as text)."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.flow = Flow.read(spec.code)
        self.folder = nvconfig.Folder(spec.code, spec.custom_definition)
        self.system, self.system_id = self.folder.system(spec.system_id)
        self._exempt = nvconfig.exemptions(spec.code)

    def audit_modes(self, benchmark: str) -> list[str]:
        """The audit tests the round requires of ``benchmark``: inference.vendor.audits' list, else each the
        Makefiles offer that the code does not exempt for it."""
        offered = [a.mode for a in self.flow.audits]
        if benchmark in self.spec.audits:
            unknown = sorted(set(self.spec.audits[benchmark]) - set(offered))
            if unknown:
                raise nvconfig.ConfigError(f"inference.vendor.audits.{benchmark}: {', '.join(unknown)} not among the "
                                           f"folder's audit targets ({', '.join(offered) or 'none'})")
            return [m for m in offered if m in self.spec.audits[benchmark]]
        member, _ = self.folder.benchmark(benchmark)
        kept = []
        for audit in self.flow.audits:
            rules = [self._exempt[t] for t in audit.tests if t in self._exempt]
            exempt = rules and all((kind == "exclude") == (member in members) for kind, members in rules)
            if not exempt:
                kept.append(audit.mode)
        return kept

    def units(self) -> list[Unit]:
        return [Unit(b, s, m) for b in self.spec.benchmarks for s in self.spec.scenarios
                for m in (*MODES, *self.audit_modes(b))]

    def run_args(self, unit: Unit) -> str:
        words = [f"--benchmarks={unit.benchmark}", f"--scenarios={unit.scenario}", *self.spec.run_args]
        if unit.mode == "accuracy":
            words.append("--test_mode=AccuracyOnly")
        return " ".join(words)

    def log_dir(self, unit: Unit) -> str:
        return f"{self.spec.log_root}/{self.system}/{unit.key}"

    def _make(self, target: str, job: str, *assignments: str) -> dict[str, Any]:
        argv = ["make", target, *assignments]
        if self.flow.takes(target, "SUBMITTER"):
            argv.append(f"SUBMITTER={self.spec.submitter}")
        return {"job": job, "target": target, "where": self.flow.where(target), "argv": argv}

    def prepare_steps(self, unit: Unit) -> list[dict[str, Any]]:
        steps = []
        for t in self.flow.prepare:
            if t == "prebuild":
                # the image only: DOCKER_DETACH=1 leaves out the interactive container the target would attach
                steps.append(self._make(t, "image", "DOCKER_DETACH=1"))
            elif t in DATA_STEPS:
                args = [f"BENCHMARKS={unit.benchmark}"] if self.flow.takes(t, "BENCHMARKS") else []
                steps.append(self._make(t, f"data/{unit.benchmark}", *args))
            elif t == "generate_engines":
                engines = Unit(unit.benchmark, unit.scenario, "performance")
                steps.append(self._make(t, f"engines/{unit.benchmark}/{unit.scenario}",
                                        f"RUN_ARGS={self.run_args(engines)}"))
            else:
                steps.append(self._make(t, t))
        return steps

    def run_step(self, unit: Unit) -> dict[str, Any]:
        if unit.mode in MODES:
            return self._make(RUN, f"run/{unit.key}", f"RUN_ARGS={self.run_args(unit)}",
                              f"LOG_DIR={self.log_dir(unit)}")
        # an audit's harness writes under build/compliance_logs/<test> whatever LOG_DIR says (the code sets it)
        return self._make(self.flow.audit(unit.mode).target, f"run/{unit.key}", f"RUN_ARGS={self.run_args(unit)}")

    def post_steps(self, unit: Unit) -> list[dict[str, Any]]:
        """The round's post-run targets that carry this unit's result into the package, in the round's order."""
        out = []
        for role, target in self.flow.post:
            if role == "stage_compliance" and unit.mode in MODES:
                continue
            if role == "stage" and unit.mode not in MODES:
                continue  # an audit reads the staged results: its stage step comes before it (steps())
            out.append(self._make(target, role))
        return out

    def steps(self, unit: Unit) -> list[dict[str, Any]]:
        before = self.prepare_steps(unit)
        if unit.mode not in MODES:
            before += [self._make(t, r) for r, t in self.flow.post if r == "stage"]
        return [*before, self.run_step(unit), *self.post_steps(unit)]

    def harness_flags(self, unit: Unit) -> dict[str, Any]:
        """The flags the harness gets for this unit: RUN_ARGS and, for an audit, what its recipe adds."""
        flags = nvconfig.parse_flags(self.run_args(unit).split())
        if unit.mode not in MODES:
            flags.update(nvconfig.parse_flags([f"--{k}={v}" for k, v in self.flow.audit(unit.mode).flags.items()]))
        return flags

    def accelerators(self) -> int:
        """The system's accelerators: the folder's systems/<system ID>_TRT.json (accelerators_per_node x
        number_of_nodes), else the count in its KnownSystem name (..._80GBx8), else 0."""
        path = self.spec.code / "systems" / f"{self.system_id}_TRT.json"
        if path.is_file() and not path.is_symlink():
            try:
                desc = safe_read.read_json(path, self.spec.code.resolve(), 1 << 20)
                return int(float(desc["accelerators_per_node"])) * int(float(desc.get("number_of_nodes") or 1))
            except (ValueError, KeyError, TypeError):
                pass
        m = re.search(r"x(\d+)$", self.system)
        return int(m.group(1)) if m else 0
