"""The configuration NVIDIA's code/main.py would pick for (benchmark, scenario, system), and the user.conf it writes
from it, found by reading the folder's Python sources as syntax trees: nothing of the folder is imported or run.

What the code does at run time, and what this reads instead:
- ``configs/<benchmark>/<Scenario>/__init__.py`` (and its ``custom.py``, or MLPINF_CUSTOM_DEFINITION_PATH's
  ``custom_configs/<benchmark>/<Scenario>/custom.py``) registers classes with
  ``@ConfigRegistry.register(HarnessType.H, AccuracyTarget.A, PowerSetting.P)``; ``ConfigRegistry.get`` picks the
  one whose ``system`` is the machine's KnownSystem, for the default workload (the benchmark's default harness in
  ``code/common/constants.py`` G_DEFAULT_HARNESS_TYPES, 99%, MaxP). Fields are inherited (single bases, pooled by
  name across the benchmark's modules) and may be arithmetic on constants or on another class's field.
- KnownSystem members come from ``add_systems(name_fmt, id_fmt, cpu, gpu, counts, ...)`` in
  ``code/common/systems/system_list.py`` and from ``custom_systems[NAME] = SystemConfiguration(..., system_id=ID)``
  (add_custom_system's custom_list.py): a system is named by either its member name or its system ID.
- code/common/submission.py's generate_user_conf writes, per scenario, the required key (offline_expected_qps ->
  target_qps, ...) and the sample count override, then the optional LoadGen keys the config or the command line set;
  latencies in ns become ms, and an audit's --server_target_qps_adj_factor scales a Server's target_qps.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrepro.core import safe_read
from mlrepro.core.errors import MlreproError

MAX_BYTES = 8 << 20
SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server")
# generate_user_conf's keys: (config field, user.conf key)
REQUIRED = {"SingleStream": "single_stream_expected_latency_ns", "MultiStream": "multi_stream_expected_latency_ns",
            "Offline": "offline_expected_qps", "Server": "server_target_qps"}
COMMON_OPTIONAL = ("min_query_count", "max_query_count", "min_duration", "max_duration")
OPTIONAL = {"SingleStream": ("single_stream_target_latency_percentile", *COMMON_OPTIONAL),
            "MultiStream": ("multi_stream_target_latency_percentile", "multi_stream_samples_per_query",
                            *COMMON_OPTIONAL),
            "Offline": COMMON_OPTIONAL,
            "Server": ("server_target_latency_percentile", "server_target_latency_ns", *COMMON_OPTIONAL)}
CONF_KEY = {"single_stream_expected_latency_ns": "target_latency",
            "single_stream_target_latency_percentile": "target_latency_percentile",
            "multi_stream_expected_latency_ns": "target_latency",
            "multi_stream_target_latency_percentile": "target_latency_percentile",
            "offline_expected_qps": "target_qps", "server_target_qps": "target_qps",
            "server_target_latency_percentile": "target_latency_percentile",
            "server_target_latency_ns": "target_latency"}
SCALE = {"target_latency": 1 / 1000000.0, "target_latency_percentile": 1}
SAMPLE_COUNT = "performance_sample_count_override"
NAME = re.compile(r"[A-Za-z0-9_.-]+")
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
       ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


class ConfigError(MlreproError, ValueError):
    """A vendor folder whose configs do not give what a run needs, said with the file and what to set."""


@dataclass(frozen=True)
class Symbol:
    """An enum member the config names (KnownSystem.H100_SXM_80GBx8, Scenario.Offline): kept as its name."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Unresolved:
    """A value this reader does not evaluate (a call, a name it does not know): its source text."""

    source: str


@dataclass(frozen=True)
class _Class:
    name: str
    base: str | None
    register: tuple[str, str, str] | None  # (HarnessType.X, AccuracyTarget.Y, PowerSetting.Z) members' names
    body: tuple[tuple[str, ast.expr], ...]
    file: str


@dataclass(frozen=True)
class Resolved:
    config: str  # the class name
    workload: str  # e.g. lwis_k_99_MaxP
    fields: dict[str, Any]
    file: str


def _parse(path: Path, root: Path) -> ast.Module:
    if path.is_symlink():
        raise ConfigError(f"{path}: a link; a vendor folder's sources are read as they are, never through a link")
    try:
        return ast.parse(safe_read.read_text(path, root, MAX_BYTES), filename=str(path))
    except SyntaxError as e:
        raise ConfigError(f"{path}: not valid Python ({e.msg}, line {e.lineno})") from e


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (head := _dotted(node.value)):
        return f"{head}.{node.attr}"
    return None


class Folder:
    """One vendor folder's constants, systems and configs, read on demand."""

    def __init__(self, folder: Path, custom: Path | None = None) -> None:
        self.folder = folder.resolve()
        self.custom = custom.resolve() if custom else None
        self._constants = _parse(self.folder / "code/common/constants.py", self.folder)

    # --- constants.py
    def _enum(self, name: str) -> dict[str, tuple[str, ...]]:
        """member -> (value, aliases...) of an AliasedNameEnum class in constants.py."""
        for node in self._constants.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                out = {}
                for stmt in node.body:
                    target = (stmt.target if isinstance(stmt, ast.AnnAssign) else
                              stmt.targets[0] if isinstance(stmt, ast.Assign) else None)
                    value = stmt.value if isinstance(stmt, ast.AnnAssign | ast.Assign) else None
                    if isinstance(target, ast.Name) and isinstance(value, ast.Call) and value.args:
                        words = [a.value for a in value.args[:1] if isinstance(a, ast.Constant)]
                        if len(value.args) > 1 and isinstance(value.args[1], ast.Tuple | ast.List):
                            words += [e.value for e in value.args[1].elts if isinstance(e, ast.Constant)]
                        out[target.id] = tuple(str(w) for w in words)
                return out
        raise ConfigError(f"{self.folder}/code/common/constants.py: no class {name}")

    def benchmark(self, name: str) -> tuple[str, str]:
        """(Benchmark member, its name as the code writes it: resnet50, bert, ...) for a name or alias."""
        for member, words in self._enum("Benchmark").items():
            if name == member or name in words:
                return member, words[0]
        known = ", ".join(w[0] for w in self._enum("Benchmark").values())
        raise ConfigError(f"inference.vendor.benchmarks: {name!r} is not a benchmark of {self.folder} "
                          f"(code/common/constants.py Benchmark: {known})")

    def default_harness(self, member: str) -> str:
        for node in self._constants.body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) else None)
            if isinstance(target, ast.Name) and target.id == "G_DEFAULT_HARNESS_TYPES" and isinstance(
                    node.value, ast.Dict):
                for k, v in zip(node.value.keys, node.value.values, strict=True):
                    if k is not None and _dotted(k) == f"Benchmark.{member}" and (d := _dotted(v)):
                        return d.split(".")[-1]
        raise ConfigError(f"{self.folder}/code/common/constants.py: G_DEFAULT_HARNESS_TYPES names no harness for "
                          f"Benchmark.{member}")

    def harness_name(self, member: str) -> str:
        return self._enum("HarnessType").get(member, (member.lower(),))[0]

    # --- systems
    def systems(self) -> dict[str, str]:
        """KnownSystem member -> system ID, from system_list.py's add_systems calls and the custom lists."""
        out: dict[str, str] = {}
        tree = _parse(self.folder / "code/common/systems/system_list.py", self.folder)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _dotted(node.func) == "add_systems" and len(node.args) >= 5:
                if any(isinstance(k, ast.keyword) and k.arg == "target_dict" for k in node.keywords):
                    continue  # deprecated systems: not in KnownSystem
                fmt_name, fmt_id, counts = node.args[0], node.args[1], node.args[4]
                if (isinstance(fmt_name, ast.Constant) and isinstance(fmt_id, ast.Constant)
                        and isinstance(counts, ast.List)):
                    for c in counts.elts:
                        if isinstance(c, ast.Constant):
                            out[str(fmt_name.value).format(c.value)] = str(fmt_id.value).format(c.value)
        for path in self._custom_files("custom_systems/custom_list.py", "code/common/systems/custom_list.py"):
            for node in ast.walk(_parse(path, path.parent)):
                if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)
                        and isinstance(node.targets[0].slice, ast.Constant) and isinstance(node.value, ast.Call)):
                    sid = next((k.value.value for k in node.value.keywords
                                if k.arg == "system_id" and isinstance(k.value, ast.Constant)), None)
                    if sid is not None:
                        out[str(node.targets[0].slice.value)] = str(sid)
        return out

    def system(self, name: str) -> tuple[str, str]:
        """(KnownSystem member, system ID) for a member name or a system ID; both become paths and make arguments,
        so a folder's names outside [A-Za-z0-9_.-] are refused."""
        known = self.systems()
        found = next(((m, sid) for m, sid in known.items() if name in (m, sid)), None)
        if found is not None:
            bad = [v for v in found if not NAME.fullmatch(v)]
            if bad:
                raise ConfigError(f"{self.folder}/code/common/systems: the system {bad[0]!r} has characters outside "
                                  "[A-Za-z0-9_.-]; it would reach a path and a make argument")
            return found
        raise ConfigError(f"inference.vendor.system_id: {name!r} is neither a KnownSystem nor a system ID of "
                          f"{self.folder} (code/common/systems/system_list.py); a system of your own is added with "
                          "NVIDIA's scripts/custom_systems/add_custom_system.py (code/common/systems/custom_list.py) "
                          "or under inference.vendor.custom_definition (MLPINF_CUSTOM_DEFINITION_PATH)")

    def _custom_files(self, in_custom: str, in_folder: str) -> list[Path]:
        path = self.custom / in_custom if self.custom else self.folder / in_folder
        return [path] if path.is_file() else []

    # --- configs
    def _classes(self, bm_name: str, scenario: str) -> dict[str, _Class]:
        files = [self.folder / "configs" / bm_name / "__init__.py",
                 self.folder / "configs" / bm_name / scenario / "__init__.py"]
        files += self._custom_files(f"custom_configs/{bm_name}/{scenario}/custom.py",
                                    f"configs/{bm_name}/{scenario}/custom.py")
        if not files[1].is_file():
            raise ConfigError(f"{files[1]}: missing; the folder has no {scenario} configs for {bm_name} "
                              "(inference.vendor.scenarios names the scenarios to run)")
        classes: dict[str, _Class] = {}
        for path in files:
            if not path.is_file():
                continue
            for node in _parse(path, self.folder if path.is_relative_to(self.folder) else self.custom).body:
                if isinstance(node, ast.ClassDef):
                    classes[node.name] = _class(node, str(path))
        return classes

    def resolve(self, benchmark: str, scenario: str, system: str, accuracy: str = "k_99",
                power: str = "MaxP") -> Resolved:
        """The config ConfigRegistry.get would return for the default harness, ``accuracy`` and ``power``."""
        if scenario not in SCENARIOS:
            raise ConfigError(f"inference.vendor.scenarios: {scenario!r} is not one of {', '.join(SCENARIOS)}")
        member, bm_name = self.benchmark(benchmark)
        sys_member, _ = self.system(system)
        harness = self.default_harness(member)
        classes = self._classes(bm_name, scenario)
        want = (f"HarnessType.{harness}", f"AccuracyTarget.{accuracy}", f"PowerSetting.{power}")
        evaluator = _Evaluator(classes)
        hits = [c for c in classes.values() if c.register == want
                and evaluator.field(c.name, "system") == Symbol(f"KnownSystem.{sys_member}")]
        workload = f"{self.harness_name(harness)}_{accuracy}_{power}"
        if not hits:
            raise ConfigError(f"{self.folder}/configs/{bm_name}/{scenario}: no config registered for "
                              f"KnownSystem.{sys_member} with {', '.join(want)}; add one (a custom.py beside it, "
                              "or under inference.vendor.custom_definition) or choose another system")
        if len(hits) > 1:
            raise ConfigError(f"{self.folder}/configs/{bm_name}/{scenario}: {len(hits)} configs registered for "
                              f"KnownSystem.{sys_member} with {', '.join(want)}: {', '.join(c.name for c in hits)}")
        cls = hits[0]
        return Resolved(cls.name, workload, evaluator.fields(cls.name), cls.file)


def _class(node: ast.ClassDef, file: str) -> _Class:
    base = _dotted(node.bases[0]).split(".")[-1] if len(node.bases) == 1 and _dotted(node.bases[0]) else None
    register = None
    for d in node.decorator_list:
        if isinstance(d, ast.Call) and (_dotted(d.func) or "").endswith("ConfigRegistry.register"):
            names = [_dotted(a) or "" for a in d.args[:3]]
            register = (names[0], names[1], names[2]) if len(names) == 3 else None
    body = []
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            body.append((stmt.targets[0].id, stmt.value))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            body.append((stmt.target.id, stmt.value))
    return _Class(node.name, base, register, tuple(body), file)


class _Evaluator:
    """Class fields as Python would compute them, for constants, containers, arithmetic, enum members and other
    classes' fields; anything else stays :class:`Unresolved`."""

    def __init__(self, classes: dict[str, _Class]) -> None:
        self.classes = classes
        self._memo: dict[tuple[str, str], Any] = {}

    def _chain(self, name: str) -> list[_Class]:
        chain, seen = [], set()
        while name in self.classes and name not in seen:
            seen.add(name)
            chain.append(self.classes[name])
            name = self.classes[name].base or ""
        return chain

    def field(self, cls: str, name: str) -> Any:
        key = (cls, name)
        if key not in self._memo:
            self._memo[key] = Unresolved(f"{cls}.{name}")  # a cycle stays unresolved
            for c in self._chain(cls):
                exprs = [e for n, e in c.body if n == name]
                if exprs:
                    self._memo[key] = self._eval(exprs[-1], c)
                    break
        return self._memo[key]

    def fields(self, cls: str) -> dict[str, Any]:
        names = {n for c in self._chain(cls) for n, _ in c.body if not n.startswith("_")}
        return {n: self.field(cls, n) for n in sorted(names)}

    def _eval(self, node: ast.expr, owner: _Class) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Dict):
            return {self._eval(k, owner): self._eval(v, owner) for k, v in zip(node.keys, node.values, strict=True)
                    if k is not None}
        if isinstance(node, ast.List | ast.Tuple):
            items = [self._eval(e, owner) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = self._eval(node.operand, owner)
            if isinstance(v, int | float):
                return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            a, b = self._eval(node.left, owner), self._eval(node.right, owner)
            if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
                try:
                    return OPS[type(node.op)](a, b)
                except ZeroDivisionError:
                    pass
        if isinstance(node, ast.Name):
            own = [e for n, e in owner.body if n == node.id]
            if own:
                return self._eval(own[-1], owner)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in self.classes:
                return self.field(node.value.id, node.attr)
            if node.value.id[:1].isupper():
                return Symbol(f"{node.value.id}.{node.attr}")
        return Unresolved(ast.unparse(node))


def _conf_value(value: Any) -> str:
    return f"{value}"  # generate_user_conf's "{:}".format: str() of the number


def user_conf(scenario: str, fields: dict[str, Any], flags: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The user.conf text generate_user_conf writes for these config fields and command-line flags (flags win),
    and the keys whose value only the run knows (name -> where it comes from)."""
    values = {**fields, **flags}
    scale = dict(SCALE)
    if scenario == "Server" and values.get("server_target_qps_adj_factor") is not None:
        scale["target_qps"] = values["server_target_qps_adj_factor"]
    lines: list[str] = []
    pending: dict[str, str] = {}
    required = REQUIRED[scenario]
    if not isinstance(values.get(required), int | float):
        raise ConfigError(f"the config gives no number for {required} ({values.get(required)!r}): the run cannot "
                          "write its user.conf; set it in the config (or pass --" + required + "=N in run_args)")
    count = values.get(SAMPLE_COUNT, values.get("performance_sample_count"))
    for name, value in ((required, values[required]), (SAMPLE_COUNT, count)):
        key = CONF_KEY.get(name, name)
        if value is None:
            pending[name] = ("the round's performance-sample-count for the model, from the submission checker "
                             "that `make build` clones (build/inference), or the code's own override")
            continue
        if key in scale:
            value = value * scale[key]
        lines.append(f"*.{scenario}.{key} = {_conf_value(value)}")
    for name in OPTIONAL[scenario]:
        value = values.get(name)
        if value is None:
            continue
        key = CONF_KEY.get(name, name)
        if isinstance(value, Unresolved):
            raise ConfigError(f"the config's {name} is {value.source}, which this reader does not evaluate")
        if key in scale:
            value = value * scale[key]
        lines.append(f"*.{scenario}.{key} = {_conf_value(value)}")
    return "".join(line + "\n" for line in lines), pending


def parse_flags(args: list[str]) -> dict[str, Any]:
    """--key=value flags as the harness's argument parser would type them (int, float, else the text)."""
    out: dict[str, Any] = {}
    for a in args:
        if not a.startswith("--") or "=" not in a:
            continue
        k, v = a[2:].split("=", 1)
        v = v.strip("\"'")
        for cast in (int, float):
            try:
                out[k] = cast(v)
                break
            except ValueError:
                continue
        else:
            out[k] = v
    return out


def exemptions(folder: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """Audit test -> ("exclude" | "include", Benchmark members) as the code's ``is_exempt`` decides it (an exempt
    test runs and does nothing); empty where the code has no such list (every test applies)."""
    out: dict[str, tuple[str, frozenset[str]]] = {}
    folder = folder.resolve()
    for rel in ("code/actionhandler/run_audit.py", "code/common/auditing.py", "code/main.py"):
        path = folder / rel
        if not path.is_file() or path.is_symlink():
            continue
        for fn in ast.walk(_parse(path, folder)):
            if not (isinstance(fn, ast.FunctionDef) and fn.name == "is_exempt"):
                continue
            for node in ast.walk(fn):
                if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                        and len(node.test.comparators) == 1):
                    continue
                test = (_dotted(node.test.comparators[0]) or "").split(".")[-1]
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
                            and stmt.targets[0].id in ("exclude_list", "include_list")
                            and isinstance(stmt.value, ast.List | ast.Tuple)):
                        members = frozenset((_dotted(e) or "").split(".")[-1] for e in stmt.value.elts)
                        out[test] = (stmt.targets[0].id.split("_")[0], members)
    return out
