"""The pipeline's configuration: validated against config/schema.yaml and each benchmark's own schema.

Every problem is reported before any job starts, with the path of the offending key.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import platform
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from mlrepro import PROJECT_ROOT
from mlrepro.containers.context import base_images
from mlrepro.core import rulesets
from mlrepro.core.errors import MlreproError
from mlrepro.core.minis import implemented_benchmarks, mini_dir
from mlrepro.runs.implementation import MINI, Implementation, ImplementationError, resolve

SCHEMA = PROJECT_ROOT / "config" / "schema.yaml"
# Keys of a benchmark's block that say how and where it runs, not what it computes: changing them
# does not make finished runs stale (rules/runs.smk keeps them out of the run rule's params).
PIPELINE_KEYS = ("runs", "runs_to_run", "image", "implementation", "system_config", "mounts", "data_dir", "env")


class ConfigError(MlreproError, ValueError):
    pass


# libyaml's parser where PyYAML has it: the same safe constructor, ten times faster (the config, the
# schema and every workflow's defaults and parameter schema are read at each Snakefile parse)
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(path: Path) -> Any:
    with path.open() as f:
        return yaml.load(f, Loader=_SafeLoader)


def _path(parts: Iterable[Any]) -> str:
    return ".".join(str(p) for p in parts) or "(top level)"


# A config is a few hundred values. YAML anchors can make a kilobyte file expand to millions (each level
# of aliases multiplies): such a config is refused before it is validated, printed or copied.
MAX_VALUES = 100_000
EXCERPT = 300  # characters of a bad value shown in an error message


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """``text`` shortened to ``limit`` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _count_values(instance: Any, limit: int) -> int:
    """The values of a parsed config (aliases counted each time they are used), without recursion; stops
    counting past ``limit``."""
    count, stack = 0, [instance]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return count


def _validate(instance: Any, schema: dict[str, Any], prefix: list[str], source: str) -> None:
    if _count_values(instance, MAX_VALUES) > MAX_VALUES:
        raise ConfigError(f"invalid configuration ({source}):\n  {_path(prefix)}: more than {MAX_VALUES} values "
                          "(YAML anchors and aliases nested into each other expand like this); write the values out")
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [f"  {excerpt(_path([*prefix, *e.absolute_path]), 120)}: {excerpt(e.message)}" for e in errors[:50]]
        more = [f"  ... and {len(errors) - 50} more"] if len(errors) > 50 else []
        raise ConfigError(f"invalid configuration ({source}):\n" + "\n".join([*lines, *more]))


# A config's ``env`` maps (benchmarks.<bm>.env, systems.<s>.env, and any other key named env) are data that the runs'
# shells and interpreters read: a name must be a plain variable name, and none of those that make bash, the loader or
# an interpreter run or load code named by the value (start-up files, preload and module paths, options that take
# code), nor those the pipeline sets itself. MPI, NCCL, CUDA and an implementation's own variables are allowed.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
CODE_ENV = re.compile(
    r"(BASH_ENV|ENV|PATH|IFS|CDPATH|PS[0-4]|SHELLOPTS|BASHOPTS|GLOBIGNORE|PROMPT_COMMAND|EXECIGNORE|INPUTRC|HISTFILE"
    r"|HOME|SHELL|ZDOTDIR|BASH_.*|LD_.*|DYLD_.*|.*PRELOAD.*|GCONV_PATH|GLIBC_TUNABLES|LOCPATH|NLSPATH|HOSTALIASES"
    r"|MALLOC_.*|PYTHON.*|PERL.*|RUBY.*|GEM_.*|NODE_.*|NPM_.*|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|JDK_JAVA_OPTIONS"
    r"|CLASSPATH|LUA_.*|TCLLIBPATH|GIT_.*|SSH_.*|EDITOR|VISUAL|PAGER|LESSOPEN|LESSCLOSE|BROWSER|TERMINFO.*"
    r"|OPENSSL_.*|.*_PLUGIN_PATH|XDG_.*|TMPDIR|CUDA_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES|MLREPRO_.*"
    r"|S(LURM|RUN)_(TASK_)?(PRO|EPI)LOG|APPTAINER.*|SINGULARITY.*|ENROOT_.*|PYXIS_.*)\Z",
    re.IGNORECASE)
MAX_ENV_VALUE = 4096  # characters of one value (paths and names: far below)


def env_problem(name: Any, value: Any) -> str | None:
    """Why ``name: value`` cannot be in a config's env map (None: it can)."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        return ("not a variable name (a letter or _, then letters, digits, _; at most 128); a config's env holds "
                "variables an implementation reads")
    if CODE_ENV.match(name):
        return ("a variable that makes a shell, the loader or an interpreter run or load code (or one the pipeline "
                "sets itself); a config is data, so mlrepro refuses it: remove it (docs/security.md)")
    text = str(value)
    if "\0" in text or "\n" in text or "\r" in text:
        return "a value with a NUL or a line break; give one line"
    if len(text) > MAX_ENV_VALUE:
        return f"a value of {len(text)} characters, over the limit of {MAX_ENV_VALUE}"
    return None


def _check_env(instance: Any, source: str) -> None:
    """ConfigError naming each bad entry of every ``env`` map of the config (without recursion)."""
    problems: list[str] = []
    stack: list[tuple[Any, list[str]]] = [(instance, [])]
    while stack:
        item, where = stack.pop()
        if not isinstance(item, Mapping):
            continue
        for key, value in item.items():
            if key == "env" and isinstance(value, Mapping):
                problems += [f"  {excerpt(_path([*where, key, name]), 120)}: {why}" for name, v in value.items()
                             if (why := env_problem(name, v))]
            elif isinstance(value, Mapping):
                stack.append((value, [*where, str(key)]))
    if problems:
        raise ConfigError(f"invalid configuration ({source}):\n" + "\n".join(sorted(problems)[:50]))


TEMPLATE_KEY = "__use_yte__"


def refuse_templates(files: Iterable[Path | str], allowed: bool) -> None:
    """ConfigError for a config file that is a YTE template (``__use_yte__: true`` at its top), unless the user
    allowed templates (``--config allow_templates=true``): a template's expressions are Python, which Snakemake
    evaluates when it reads the file (docs/security.md). The file is read here as plain YAML, bounded."""
    if allowed:
        return
    for file in files:
        path = Path(file)
        try:
            with path.open("rb") as f:
                text = f.read(8 << 20)
            data = yaml.load(text, Loader=_SafeLoader)
        except (OSError, yaml.YAMLError):
            continue  # Snakemake read it; a file it could not read has already stopped it
        if isinstance(data, dict) and data.get(TEMPLATE_KEY):
            raise ConfigError(
                f"invalid configuration ({path}):\n  {TEMPLATE_KEY}: this config file is a template whose "
                "expressions are Python code; mlrepro refuses templates unless you allow them with --config "
                "allow_templates=true. Snakemake evaluates a template when it loads the file, before mlrepro is "
                "asked: never pass a config file from someone else without reading it (python -m "
                "mlrepro.config check FILE reads one without running it). See docs/security.md")


def _fill_defaults(instance: dict[str, Any], schema: dict[str, Any]) -> None:
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
        if isinstance(instance.get(key), dict) and sub.get("type") == "object":
            _fill_defaults(instance[key], sub)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(copy.deepcopy(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# system: auto, as the process that plans names it: a job on a cluster node (which parses the Snakefile again)
# inherits it, so that its run folders (runs/<system>/...) are those the planner asked for
SYSTEM_ENV = "MLREPRO_AUTO_SYSTEM"


def host_system_name() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", platform.node() or "localhost").strip("-") or "localhost"


# The pattern of config/schema.yaml's system (a folder name of the package): the environment variable
# that stands for the key is held to it.
SYSTEM_NAME = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9_.-]{1,200}\Z")


def system_name(configured: str) -> str:
    if configured != "auto":
        return configured
    named = os.environ.get(SYSTEM_ENV)
    if named is None or named == "":
        return host_system_name()
    if not SYSTEM_NAME.match(named):
        raise ConfigError(f"environment variable {SYSTEM_ENV}={excerpt(repr(named), 80)}: not a system name (letters, "
                          "digits, _ . -; not . or ..), as config key system requires; unset it or fix it")
    return named


def run_seed(base: int, benchmark: str, index: int) -> int:
    """A distinct, reproducible seed per run (the rules from v4.1 on forbid repeated seeds)."""
    digest = hashlib.sha256(f"{base}/{benchmark}/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def config_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Benchmark:
    name: str
    params: dict[str, Any]  # ours: defaults merged with the config's overrides, pipeline keys left out
    runs: int
    required_runs: int
    implementation: Implementation
    data_dir: Path | None = None  # a vendor's dataset on this host; ours is generated into {outdir}/data
    # M >= runs launched; of more than runs, the package holds the median window (core/median_window.py)
    runs_to_run: int = 0  # 0: runs
    env: dict[str, str] = field(default_factory=dict)  # benchmarks.<bm>.env: variables its run.sub reads

    @property
    def mini(self) -> bool:
        return self.implementation.kind == MINI

    @property
    def data_params(self) -> dict[str, Any]:
        return {"data": self.params["data"]}

    @property
    def image(self) -> str:
        return self.implementation.image


def load(raw: Mapping[str, Any], source: str = "config",
         base_dir: Path | None = None) -> tuple[dict[str, Any], dict[str, Benchmark]]:
    """Validate ``raw`` (Snakemake's ``config``); return it with defaults filled, and the benchmarks.

    Relative implementation and data folders are taken from ``base_dir`` (the working directory).
    """
    base_dir = base_dir or Path.cwd()
    config = copy.deepcopy(dict(raw))
    schema = _load_yaml(SCHEMA)
    _validate(config, schema, [], source)
    _check_env(config, source)
    _fill_defaults(config, schema)
    if config.get("audit") or config.get("reproduce"):
        return config, {}

    usage, ruleset = config["usage"], config["ruleset"]
    if usage == "inference":
        raise ConfigError(f"invalid configuration ({source}):\n  usage: inference is for audits (audit=PATH); "
                          "the pipeline serves its models through LoadGen as configured under inference:")
    # the release that judges (logging_release, else the installed one) says which benchmarks and runs there are
    try:
        release = rulesets.release_folder(config.get("logging_release"), ruleset, usage)
        known = rulesets.known_rulesets(usage, release)
    except ValueError as e:
        raise ConfigError(f"invalid configuration ({source}):\n  logging_release: {e}") from None
    judge = f"mlperf_logging in {release}" if release else "the installed mlperf_logging"
    if ruleset not in known:
        hint = "" if release else ("; a later round's ruleset needs its release: set logging_release, or add its row "
                                   "to mlrepro/core/releases.yaml")
        raise ConfigError(f"invalid configuration ({source}):\n  ruleset: unknown ruleset {ruleset!r} for "
                          f"{usage}; {judge} knows {', '.join(known)}{hint}")
    implemented = implemented_benchmarks()
    allowed = rulesets.allowed_benchmarks(ruleset, usage, release)
    benchmarks: dict[str, Benchmark] = {}
    problems = []
    unknown = [name for name in config["only"] if name not in config["benchmarks"]]
    if unknown:
        raise ConfigError(f"invalid configuration ({source}):\n  only: {', '.join(unknown)} not among the "
                          f"configured benchmarks ({', '.join(config['benchmarks'])})")
    selected = selection(config)
    for name, overrides in config["benchmarks"].items():
        key = f"benchmarks.{name}"
        overrides = dict(overrides or {})
        choice = overrides.get("implementation") or _first_system_folder(config, name) or MINI
        if choice == MINI and name not in implemented:
            problems.append(f"  {key}: no implementation of {name!r} (minis/ has: {', '.join(implemented)}); "
                            "set implementation: <folder> for one of your own")
            continue
        if selected is not None and name not in selected:
            # left out of this run (only:, or no system lists it), but still checked: a mistake is reported now,
            # not when it is chosen
            try:
                _validate(deep_merge(_load_yaml(mini_dir(name) / "defaults.yaml"), overrides or {}),
                          _load_yaml(mini_dir(name) / "params.schema.yaml"), ["benchmarks", name], source)
            except ConfigError as e:
                problems.extend(str(e).splitlines()[1:])
            continue
        if name not in allowed:
            problems.append(f"  {key}: ruleset {usage} {ruleset} has no benchmark {name!r} "
                            f"(it has: {', '.join(allowed)}); leave it out with only: [...] or the systems' "
                            "benchmarks: lists, or choose another ruleset")
            continue
        if choice == MINI:
            params = deep_merge(_load_yaml(mini_dir(name) / "defaults.yaml"), overrides)
            pipeline = {k: params[k] for k in PIPELINE_KEYS if k in params}
            own = {k: v for k, v in params.items() if k not in PIPELINE_KEYS or k in ("runs", "image")}
            try:  # each workflow's schema documents runs and image; the other pipeline keys are config/schema.yaml's
                _validate(own, _load_yaml(mini_dir(name) / "params.schema.yaml"), ["benchmarks", name], source)
            except ConfigError as e:
                problems.extend(str(e).splitlines()[1:])
                continue
            params = {k: v for k, v in params.items() if k not in PIPELINE_KEYS}
        else:
            pipeline = {k: overrides.pop(k) for k in PIPELINE_KEYS if k in overrides}
            params = {}
            if overrides:
                problems.append(f"  {key}: {', '.join(sorted(overrides))}: an implementation folder takes its "
                                "hyperparameters from its config file; set system_config instead")
                continue
        required = rulesets.required_runs(name, usage, release)
        runs = int(pipeline.get("runs", required))
        if runs != required and not config["allow_fewer_runs"]:
            problems.append(f"  {key}.runs: {runs} runs, but {usage} {ruleset} requires exactly {required}; "
                            "set allow_fewer_runs: true for a result that is marked not submittable")
            continue
        if runs > required:
            problems.append(f"  {key}.runs: {runs} runs, more than the {required} a submission holds; set "
                            "runs_to_run for more launches, of which the package holds the median window")
            continue
        runs_to_run = int(pipeline.get("runs_to_run", runs))
        if runs_to_run < runs:
            problems.append(f"  {key}.runs_to_run: {runs_to_run}, fewer than the {runs} runs a submission holds")
            continue
        data_dir = None
        if choice != MINI:
            if not pipeline.get("data_dir"):
                problems.append(f"  {key}.data_dir: an implementation folder needs its dataset: give the host "
                                "folder that is mounted where the implementation expects it")
                continue
            data_dir = (base_dir / str(pipeline["data_dir"])).resolve()
            if not data_dir.is_dir():
                problems.append(f"  {key}.data_dir: {data_dir} does not exist; prepare the dataset there "
                                "(the implementation's README says how) or point data_dir at it")
                continue
        system, config_file = _first_system(config, name)
        try:
            impl = resolve(name, str(choice), system, config_file or pipeline.get("system_config"),
                           dict(pipeline.get("mounts") or {}), base_dir, pipeline.get("image"))
        except ImplementationError as e:
            problems.append(f"  {key}: {e}")
            continue
        if choice != MINI and impl.container is None and config["engine"] != "native" and not base_images(
                impl.folder / "Dockerfile", {k: str(v) for k, v in config["build_args"].items()}):
            problems.append(f"  {key}: {impl.folder / 'Dockerfile'} names no base image (no FROM, or only FROM "
                            "scratch); start it with `ARG FROM_IMAGE_NAME=<image>` and `FROM ${FROM_IMAGE_NAME}`")
            continue
        benchmarks[name] = Benchmark(name, params, runs, required, impl, data_dir, runs_to_run,
                                     {k: str(v) for k, v in (pipeline.get("env") or {}).items()})
    if problems:
        raise ConfigError(f"invalid configuration ({source}):\n" + "\n".join(problems))
    return config, benchmarks


def selection(config: Mapping[str, Any]) -> set[str] | None:
    """The benchmarks that run: only:, else those the systems list where every system lists its own; None: all."""
    if config["only"]:
        return set(config["only"])
    systems = (config.get("systems") or {}).values()
    if systems and all(block.get("benchmarks") for block in systems):
        return {b for block in systems for b in block["benchmarks"]}
    return None


def _first_system_folder(config: Mapping[str, Any], benchmark: str) -> str | None:
    """The implementation folder the first system that runs the benchmark names (systems.<name>.implementations)."""
    for block in (config.get("systems") or {}).values():
        if benchmark in (block.get("benchmarks") or config["benchmarks"]):
            return (block.get("implementations") or {}).get(benchmark)
    return None


def _first_system(config: Mapping[str, Any], benchmark: str) -> tuple[str, str | None]:
    """The system whose config file describes the benchmark here (mlrepro/systems.py resolves each other
    system's): the one system of system:, else the first of systems: that runs it, with its config_files entry."""
    for name, block in (config.get("systems") or {}).items():
        if benchmark in (block.get("benchmarks") or config["benchmarks"]):
            return name, (block.get("config_files") or {}).get(benchmark)
    return system_name(config["system"]), None


def submittable(benchmarks: Mapping[str, Benchmark]) -> bool:
    return all(b.runs == b.required_runs for b in benchmarks.values())


def check_file(path: Path) -> str:
    """What ``python -m mlrepro.config check FILE`` says of a config file, read as plain YAML (nothing in it
    runs): a template, a config of too many values, keys the schema refuses; or that it is well formed."""
    with path.open("rb") as f:
        data = yaml.load(f.read(8 << 20), Loader=_SafeLoader)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a mapping of keys at its top level")
    refuse_templates([path], allowed=False)  # checked before any use, whatever the file allows itself
    _validate(data, _load_yaml(SCHEMA), [], str(path))
    _check_env(data, str(path))
    return f"{path}: no template, and its keys are those config/schema.yaml allows"


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "check":
        sys.exit("usage: python -m mlrepro.config check FILE")
    try:
        print(check_file(Path(sys.argv[2])))
    except (ConfigError, OSError, yaml.YAMLError) as e:
        sys.exit(f"error: {e}")
