"""The systems of one submission: ``systems: {NAME: {nodes, benchmarks, config_files, implementations, env,
platform, description}}``.

A submission holds one result folder and one system description per system (NVIDIA's v2.0 package holds 21:
dgxa100_n1_..., dgxa100_n8_..., ...). Each (system, benchmark) is its own unit of runs: its job shape takes
the system's node count, its vendor folder (``implementations``, current rounds ship one per system) and config file
are the system's (``config_files``, else config_<NAME>.sh, else the benchmark's ``system_config``), its run.sub gets
``benchmarks.<bm>.env`` then ``env`` (the system's wins), its runs sit in ``runs/<system>/<benchmark>/``. Today's
``system:`` is the one-system shorthand: one system of every benchmark, its nodes from ``job_shapes`` or the config
file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.config import Benchmark, ConfigError, system_name
from mlrepro.runs.implementation import MINI, ImplementationError, resolve


@dataclass(frozen=True)
class System:
    name: str
    benchmarks: tuple[str, ...]  # of the configured (and selected) ones, in the config's order
    nodes: int | None = None  # None (the shorthand): each run's shape says
    config_files: dict[str, str] = field(default_factory=dict)
    description: dict[str, str] = field(default_factory=dict)  # system description fields set by hand
    implementations: dict[str, str] = field(default_factory=dict)  # benchmark -> this system's folder
    env: dict[str, str] = field(default_factory=dict)  # variables its runs' run.sub reads (over benchmarks.<bm>.env)
    platform: str | None = None  # its nodes' (linux/arm64 for GB200): the images its runs use are built for it


def load(config: Mapping[str, Any], benchmarks: Mapping[str, Benchmark], base_dir: Path,
         source: str = "config") -> tuple[dict[str, System], dict[tuple[str, str], Benchmark]]:
    """The systems, and each (system, benchmark)'s benchmark with its implementation's config file resolved for
    that system. Every problem is named by its key (systems.<name>...) in one ConfigError."""
    raw = config.get("systems") or {}
    if not raw:
        name = system_name(config["system"])
        one = System(name, tuple(benchmarks))
        return {name: one}, {(name, b): spec for b, spec in benchmarks.items()}
    problems: list[str] = []
    if config["system"] != "auto":
        problems.append(f"  system: {config['system']!r} and systems: both set; name the one system under "
                        "systems: (system: is the one-system shorthand)")
    systems: dict[str, System] = {}
    units: dict[tuple[str, str], Benchmark] = {}
    resolved: dict[tuple[str, str, str], Benchmark] = {}  # (benchmark, folder, config file): shared by systems
    for name, block in raw.items():
        key = f"systems.{name}"
        listed = list(block.get("benchmarks") or config["benchmarks"])
        if unknown := [b for b in listed if b not in config["benchmarks"]]:
            problems.append(f"  {key}.benchmarks: {', '.join(unknown)} not among the configured benchmarks "
                            f"({', '.join(config['benchmarks'])})")
            continue
        for part in ("config_files", "implementations"):
            if stray := sorted(set(block.get(part) or {}) - set(listed)):
                problems.append(f"  {key}.{part}: {', '.join(stray)} not among this system's benchmarks")
        system = System(name, tuple(b for b in listed if b in benchmarks), block.get("nodes"),
                        dict(block.get("config_files") or {}), dict(block.get("description") or {}),
                        dict(block.get("implementations") or {}),
                        {k: str(v) for k, v in (block.get("env") or {}).items()}, block.get("platform"))
        if system.benchmarks:  # else every benchmark of it left out by only: (no results, no system)
            systems[name] = system
    for system in systems.values():
        key = f"systems.{system.name}"
        for b in system.benchmarks:
            try:
                units[(system.name, b)] = _for_system(system, benchmarks[b], config, base_dir, resolved)
            except ImplementationError as e:
                part = "implementations" if b in system.implementations else "config_files"
                problems.append(f"  {key}.{part}.{b}: {e}")
    built_for: dict[str, set[str | None]] = {}
    for (s, _), unit in units.items():
        if unit.implementation.container is None:
            built_for.setdefault(unit.image, set()).add(systems[s].platform)
    for image, platforms in sorted(built_for.items()):
        if len(platforms) > 1:
            problems.append(f"  systems.<name>.platform: image {image} runs on systems of platforms "
                            f"{', '.join(sorted(p or 'default' for p in platforms))}; give each "
                            "platform its own implementation folder (systems.<name>.implementations)")
    if problems:
        raise ConfigError(f"invalid configuration ({source}):\n" + "\n".join(problems))
    return systems, units


def run_sub_env(system: System, benchmark: Benchmark) -> dict[str, str]:
    """The variables the config gives a run's run.sub: benchmarks.<bm>.env, then systems.<name>.env (it wins)."""
    return {**benchmark.env, **system.env}


def _chosen(system: System, benchmark: Benchmark, config: Mapping[str, Any]) -> str | None:
    return system.config_files.get(benchmark.name) or (config["benchmarks"][benchmark.name] or {}).get("system_config")


def _config_name(system: System, benchmark: Benchmark, config: Mapping[str, Any]) -> str:
    """A vendor folder's config file per system: config_<NAME>.sh by default; ours config_CPU.sh unless chosen."""
    impl = benchmark.implementation
    return _chosen(system, benchmark, config) or (f"config_{system.name}.sh" if impl.kind != MINI
                                                  else impl.config_file.name)


def _for_system(system: System, benchmark: Benchmark, config: Mapping[str, Any], base_dir: Path,
                resolved: dict[tuple[str, str, str], Benchmark]) -> Benchmark:
    overrides = config["benchmarks"][benchmark.name] or {}
    chosen = _chosen(system, benchmark, config)
    impl = benchmark.implementation
    name = _config_name(system, benchmark, config)
    choice = system.implementations.get(benchmark.name) or str(overrides.get("implementation", MINI))
    folder = impl.folder if choice == MINI else (base_dir / choice).resolve()
    if name == impl.config_file.name and folder == impl.folder:
        unit = benchmark
    elif (benchmark.name, str(folder), name) in resolved:
        unit = resolved[(benchmark.name, str(folder), name)]
    else:
        impl = resolve(benchmark.name, choice, system.name, chosen, dict(overrides.get("mounts") or {}), base_dir,
                       overrides.get("image") if choice != MINI else impl.image)
        unit = resolved[(benchmark.name, str(folder), name)] = dataclasses.replace(benchmark, implementation=impl)
    return unit
