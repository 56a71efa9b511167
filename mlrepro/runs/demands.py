"""What a folder's run needs set, found from the run itself: run.sub executed on the path it takes.

A variable is demanded when the path run.sub takes with the run's variables (the config file's, the config's, the
run's own) would stop on it or mount nothing from it:

- bash stops on it: ``unbound variable`` under run.sub's own ``set -u``, or ``${X:?...}``;
- a container mount of a step it records has an empty source (``--container-mounts=...,:/ckpt``), or its
  ``--container-image`` is empty.

So a variable read only in a branch not taken, under a default (``${X:-}``) or inside a single-quoted program of
another language (jq, awk, python -c) is never demanded: bash never expands it. Each demand names the file and line
that reads it (bash's, or the statement of the path taken that names the mount) and the container-side mount it
feeds, if any. To find them all in one go, each variable bash stops on is given a placeholder path
(:data:`PLACEHOLDER`) and run.sub runs again, until it stops on none (at most :data:`ROUNDS` runs); the placeholder
then shows which mount it feeds.

The finding runs run.sub (mlrepro/slurm/trace.py): only in jobs, the capture job (before any run: it refuses the
config file) and the launch preview, never while the DAG is built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.runs import vendor_data
from mlrepro.slurm import trace

PLACEHOLDER = "/MLREPRO_UNSET/"  # + the variable's name: the value a demanded variable is traced with
ROUNDS = 12


@dataclass
class Demand:
    variable: str | None  # None: an empty mount source that no statement of the path names
    file: str
    line: int
    reason: str  # "unset" (bash: unbound variable), "stops" (${X:?}), "empty" (an empty mount source or image)
    message: str = ""  # bash's
    mounts: list[str] = field(default_factory=list)  # the container-side destinations it is the source of

    def to_dict(self) -> dict[str, Any]:
        return {"variable": self.variable, "file": self.file, "line": self.line, "reason": self.reason,
                "message": self.message, "mounts": self.mounts}

    def describe(self) -> str:
        """``file:line reads ${X} ... (what for)``."""
        what = {"unset": "reads ${%s} unset (bash: unbound variable)",
                "stops": "stops on ${%s} (bash: %s)",
                "empty": "mounts ${%s}, which is empty"}[self.reason]
        text = f"{self.file}:{self.line} " + (what % ((self.variable, self.message) if self.reason == "stops"
                                                     else (self.variable,)) if self.variable else
                                              "mounts an empty source")
        if self.mounts:
            text += f"; it is the source of the container mount {', '.join(self.mounts)}"
        return text


@dataclass(frozen=True)
class Finding:
    demands: list[Demand]
    trace: trace.Trace  # of the last run: the path with every demanded variable set (to its placeholder)


def find(run_sub: Path, env: dict[str, str], node: trace.Node, timeout_s: float = 120) -> Finding:
    """The variables ``run_sub`` needs that ``env`` (what a run gives it) leaves unset or empty."""
    demands: dict[str, Demand] = {}
    given = dict(env)
    traced = trace.trace(run_sub, given, node, timeout_s)
    for _ in range(ROUNDS):
        new = [e for e in traced.errors if e.name not in demands]
        if not new or traced.timed_out:  # a run.sub that hangs is the preview's error, not run again
            break
        for e in new:
            demands[e.name] = Demand(e.name, e.file, e.line, "unset" if e.message == "unbound variable" else "stops",
                                     e.message)
            given[e.name] = PLACEHOLDER + e.name
        traced = trace.trace(run_sub, given, node, timeout_s)
    found = list(demands.values())
    for argv, at in traced.steps_at():
        for source, dest in trace.mounts(argv):
            if source.startswith(PLACEHOLDER):
                known = demands.get(source[len(PLACEHOLDER):].split("/")[0])
                if known is not None and dest not in known.mounts:
                    known.mounts.append(dest)
            elif not source:
                found.append(_empty(dest, at, traced, run_sub.parent))
        opts, _ = trace.split(argv)
        if opts.get("--container-image") == "":
            found.append(Demand(_image_variable(traced), *_place(at), "empty", mounts=[]))
    return Finding(_unique(found), traced)


def _unique(demands: list[Demand]) -> list[Demand]:
    seen: dict[tuple[str | None, str], Demand] = {}
    for d in demands:
        key = (d.variable, "" if d.variable else ",".join(d.mounts))
        if key in seen:
            seen[key].mounts += [m for m in d.mounts if m not in seen[key].mounts]
        else:
            seen[key] = d
    return list(seen.values())


_VAR_MOUNT = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?:\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def _mount_pattern(dest: str) -> re.Pattern[str]:
    # `${VAR}:/dest`, `$VAR:/dest` (then `:ro`, `,`, a quote, a space or the end)
    return re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?:" + re.escape(dest) + r"(?=$|[:,\"'\s}])", re.MULTILINE)


def _empty(dest: str, at: str, traced: trace.Trace, folder: Path) -> Demand:
    """The demand of a mount whose source is empty: the last statement of the path taken that names it
    (``${VAR}:dest``), else a file of the folder that the path named and that names it (mounts.txt through
    envsubst), else the srun's own line (then no variable)."""
    pattern = _mount_pattern(dest)
    for file, line, text in reversed(traced.statements):
        if m := pattern.search(text):
            return Demand(m.group(1), file, line, "empty", mounts=[dest])
    # `${SRC}:${DEST_VAR}` where the path gave DEST_VAR its value (`: "${CONTAINER_GRAPH_DIR:=/graph}"`)
    named_dest = {name for _, _, text in traced.statements
                  for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?=" + re.escape(dest) + r"\}", text)}
    for file, line, text in reversed(traced.statements):
        for source, target in _VAR_MOUNT.findall(text):
            if target in named_dest:
                return Demand(source, file, line, "empty", mounts=[dest])
    named = {w for _, _, text in traced.statements for w in re.findall(r"[\w.-]+", text)}
    for path in sorted(folder.iterdir()):
        if path.name in named and path.is_file() and not path.is_symlink() and path.stat().st_size < 1 << 20:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            for i, text in enumerate(lines, 1):
                if m := pattern.search(text):
                    return Demand(m.group(1), str(path), i, "empty", mounts=[dest])
    return Demand(None, *_place(at), "empty", mounts=[dest])


def _place(at: str) -> tuple[str, int]:
    """(file, line) of a command's ``file:line``."""
    file, _, line = at.rpartition(":")
    return file, int(line) if line.isdigit() else 0


def mount_table(traced: trace.Trace, folder: Path, benchmark: str, fills: dict[str, str]) -> list[dict[str, Any]]:
    """Every container mount of the path taken (each destination once, in their order): its source, the variable
    that feeds it (the statement of the path that names it), whether the source exists on this (the login) node and
    what fills it (mlrepro/runs/vendor_data.py)."""
    table: dict[str, dict[str, Any]] = {}
    for argv, at in traced.steps_at():
        for source, dest in trace.mounts(argv):
            if dest in table:
                continue
            feeding = _empty(dest, at, traced, folder).variable
            # the login node sees the shared file system the nodes mount from (docs/vendor-launch.md)
            table[dest] = {"destination": dest, "source": source, "variable": feeding,
                           "exists_here": bool(source) and Path(source).exists(),
                           "fill": vendor_data.fill(benchmark, [dest], fills)}
    return list(table.values())


def _image_variable(traced: trace.Trace) -> str | None:
    for _, _, text in reversed(traced.statements):
        if m := re.search(r"--container-image=\"?\$\{?([A-Za-z_][A-Za-z0-9_]*)", text):
            return m.group(1)
    return None


def problems(demands: list[Demand], *, benchmark: str, system: str, config_name: str,
             fills: dict[str, str]) -> list[str]:
    """One line per demand, naming the config key to set, the file and line, what it is for and what fills it
    (``fills``: the destinations the benchmark's data recipe fills, mlrepro.datasets.vendor_fills)."""
    lines = []
    for d in demands:
        var = d.variable or "<the variable of that mount>"
        fill = vendor_data.fill(benchmark, d.mounts, fills)
        lines.append(f"  benchmarks.{benchmark}.env.{var}: {d.describe()}, and neither {config_name} nor the config "
                     f"sets it; set benchmarks.{benchmark}.env.{var} (or systems.{system}.env.{var}) to its value"
                     f" ({fill})")
    return lines
