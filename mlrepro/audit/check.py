"""The audit's check step: every result file over a process pool, skipping those whose content is in
the cache.

It imports only the compliance engine: the package checker, RCP tables and summarizer (scipy,
pandas) are the summarize step's, whose imports would otherwise delay the first worker by seconds.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.audit import discover, engine
from mlrepro.audit.cache import Cache
from mlrepro.audit.runfile import FileCheck, audit_bytes
from mlrepro.core import atomic


@dataclass
class CheckRun:
    records: dict[str, FileCheck]  # path -> check
    checked: list[str] = field(default_factory=list)  # paths checked in this run (cache misses)
    unreadable: dict[str, str] = field(default_factory=dict)  # path -> why it was not read


@dataclass(frozen=True)
class _Task:
    usage: str
    ruleset: str
    root: str
    max_bytes: int | None


# One file's outcome: ("unreadable", why), ("cached", content hash) or ("checked", record).
_Outcome = tuple[str, Any]


def _check_one(task: _Task, path: str) -> _Outcome:
    """Read one file once (in the worker, so that reading and hashing run in parallel too), then its
    content hash where the cache has it, or a fresh check."""
    try:
        data = discover.read_entry(Path(path), Path(task.root), task.max_bytes)
    except discover.EntryRejected as e:
        return "unreadable", str(e)
    except OSError as e:
        return "unreadable", f"{type(e).__name__}: {e}"
    digest = hashlib.sha256(data).hexdigest()
    # Only what was cached before this run counts as cached (the cache is written once, after the run):
    # a file whose twin another worker checked a moment ago is checked too, so that what a run reports
    # checked does not depend on the workers' timing.
    if digest in _KNOWN:
        return "cached", digest
    return "checked", audit_bytes(data, task.usage, task.ruleset, digest)


_KNOWN: frozenset[str] = frozenset()  # a worker's copy of the content hashes cached before the run


def _init_worker(known: frozenset[str], fast: bool) -> None:
    global _KNOWN
    _KNOWN = known
    engine.start_worker(fast)
    # A log's lines become hundreds of thousands of small dicts and tuples, freed by reference
    # counting: the default collector would run thousands of times a round (3% of the CPU time) to
    # find no cycles. Collected rarely, and never through the modules the worker inherited.
    gc.freeze()
    gc.set_threshold(20_000, 20, 100)


def _size(path: str) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:  # gone or unreadable: its verdict comes from the worker
        return 0


def check_files(paths: Iterable[str], cache: Cache, usage: str, ruleset: str, jobs: int, root: Path = Path("/"),
                max_bytes: int | None = discover.DEFAULT_MAX_FILE_MB << 20, fast: bool = True) -> CheckRun:
    """Audit every file in ``paths``; ``jobs`` worker processes check the cache misses, with the engine's
    fast paths where ``fast`` (else the checker as it ships).

    Only regular files inside ``root`` up to ``max_bytes`` are read; any other entry is
    ``unreadable`` with its verdict (discover.entry_problem)."""
    engine.parser_module(ruleset)  # an unknown ruleset is a configuration error: fail before any work
    check = functools.partial(_check_one, _Task(usage, ruleset, str(root), max_bytes))
    # Largest first, so that one big log is not left for the end while the other workers idle.
    todo = sorted(paths, key=_size, reverse=True)
    run = CheckRun(records={})
    if not todo:
        return run
    cached = cache.load()
    fresh: dict[str, FileCheck] = {}
    with ProcessPoolExecutor(max_workers=max(1, jobs), initializer=_init_worker,
                             initargs=(frozenset(cached), fast)) as pool:
        for path, (kind, value) in zip(todo, pool.map(check, todo, chunksize=4), strict=True):
            if kind == "unreadable":
                run.unreadable[path] = value
            elif kind == "cached":
                run.records[path] = cached[value]
            else:
                run.records[path] = fresh[value.sha256] = value
                run.checked.append(path)
    if fresh:
        cache.save({**cached, **fresh})
    return run


def check_round(root: Path, out: Path, cache_dir: Path, usage: str, ruleset: str, jobs: int,
                max_bytes: int | None = discover.DEFAULT_MAX_FILE_MB << 20, fast: bool = True) -> dict[str, Any]:
    """Audit every result file under ``root``; write ``out`` (path -> record, plus what was re-checked)."""
    files = discover.result_files(discover.find_orgs(root))
    run = check_files(files, Cache(cache_dir, usage, ruleset), usage, ruleset, jobs, root, max_bytes, fast)
    doc = {"usage": usage, "ruleset": ruleset, "root": str(root), "checked": sorted(run.checked),
           "unreadable": run.unreadable, "files": {p: run.records[p].to_dict() for p in files if p in run.records}}
    # compact: the indented form takes json's pure-Python encoder, seconds on a round's records
    atomic.write_text(out, json.dumps(doc, sort_keys=True))
    return doc
