"""One Snakemake job as the project's code receives it: a small typed record of the rule's named files, params,
wildcards, threads and log, and the call of the job's entry function.

The same record whether the job runs in the process Snakemake starts for it (``mlrepro/jobs.py``), in a warm
parent's child (``mlrepro/runs/warm.py``: the record travels as JSON) or in an interpreter isolated under an
mlperf-logging release (``python -m mlrepro.jobs < JOB``). Its params hold JSON values only (made so when the record
is made), so that the three see the same values.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.core.errors import MlreproError


@dataclass(frozen=True)
class Files:
    """A rule's input or output files: every path in the rule's order, and those it names (one path, or a list)."""

    paths: tuple[str, ...] = ()
    named: dict[str, str | list[str]] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Path:
        value = self.named[name]
        if isinstance(value, list):
            raise TypeError(f"{name} names {len(value)} files: read them with .many({name!r})")
        return Path(value)

    def many(self, name: str) -> list[Path]:
        """The files ``name`` names (one or several)."""
        value = self.named.get(name, [])
        return [Path(v) for v in ([value] if isinstance(value, str) else value)]

    def get(self, name: str) -> Path | None:
        """The one file ``name`` names; None where the rule gave it none (an empty list)."""
        files = self.many(name)
        return files[0] if files else None

    def __iter__(self) -> Iterator[Path]:
        return (Path(p) for p in self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def first(self) -> Path:
        return Path(self.paths[0])


@dataclass(frozen=True)
class Job:
    rule: str
    input: Files = Files()
    output: Files = Files()
    params: dict[str, Any] = field(default_factory=dict)
    wildcards: dict[str, str] = field(default_factory=dict)
    threads: int = 1
    log: str | None = None

    def to_json(self) -> str:
        return json.dumps({"rule": self.rule, "input": _files_dict(self.input), "output": _files_dict(self.output),
                           "params": self.params, "wildcards": self.wildcards, "threads": self.threads,
                           "log": self.log}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Job:
        data = json.loads(text)
        return cls(rule=data["rule"], input=Files(tuple(data["input"]["paths"]), data["input"]["named"]),
                   output=Files(tuple(data["output"]["paths"]), data["output"]["named"]),
                   params=data["params"], wildcards=data["wildcards"], threads=int(data["threads"]), log=data["log"])


def _files_dict(files: Files) -> dict[str, Any]:
    return {"paths": list(files.paths), "named": files.named}


def json_values(value: Any) -> Any:
    """``value`` as JSON gives it back (paths as text, tuples as lists): what a job's params hold."""
    return json.loads(json.dumps(value, default=str))


def call(entry: str, job: Job) -> int:
    """Run ``entry`` ("package.module:function") on ``job`` in this process; its exit status. A project error
    (MlreproError) or a ``sys.exit("message")`` is its one line on stderr; any other exception its traceback."""
    module, _, function = entry.partition(":")
    code: Any = 0
    try:
        getattr(importlib.import_module(module), function)(job)
    except SystemExit as e:
        code = e.code
    except MlreproError as e:
        print(f"error: {e}", file=sys.stderr)
        code = 1
    except Exception:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    if code is None:
        return 0
    if not isinstance(code, int):
        print(code, file=sys.stderr, flush=True)
        return 1
    return code
