"""Check many result files over a process pool, skipping those whose content is in the cache."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mlrepro.audit import discover, engine
from mlrepro.audit.cache import Cache
from mlrepro.audit.runfile import FileCheck, audit_bytes


@dataclass
class CheckRun:
    records: dict[str, FileCheck]  # path -> check
    checked: list[str] = field(default_factory=list)  # paths checked in this run (cache misses)
    unreadable: dict[str, str] = field(default_factory=dict)  # path -> why it was not read


def _check_one(args: tuple[str, str, str, str, int | None]) -> FileCheck:
    path, usage, ruleset, root, max_bytes = args
    return audit_bytes(discover.read_entry(Path(path), Path(root), max_bytes), usage, ruleset)


def _init_worker() -> None:
    engine.install_fast_paths()


def check_files(paths: Iterable[str], cache: Cache, usage: str, ruleset: str, jobs: int, root: Path = Path("/"),
                max_bytes: int | None = discover.DEFAULT_MAX_FILE_MB << 20) -> CheckRun:
    """Audit every file in ``paths``; ``jobs`` worker processes check the cache misses.

    Only regular files inside ``root`` up to ``max_bytes`` are read; any other entry is
    ``unreadable`` with its verdict (discover.entry_problem)."""
    engine.parser_module(ruleset)  # an unknown ruleset is a configuration error: fail before any work
    run = CheckRun(records={})
    todo: list[str] = []
    for path in paths:
        try:
            digest = hashlib.sha256(discover.read_entry(Path(path), root, max_bytes)).hexdigest()
        except discover.EntryRejected as e:
            run.unreadable[path] = str(e)
            continue
        except OSError as e:
            run.unreadable[path] = f"{type(e).__name__}: {e}"
            continue
        hit = cache.get(digest)
        if hit is None:
            todo.append(path)
        else:
            run.records[path] = hit
    # Largest first, so that one big log is not left for the end while the other workers idle.
    todo.sort(key=lambda p: -os.path.getsize(p))
    if todo:
        with ProcessPoolExecutor(max_workers=max(1, jobs), initializer=_init_worker) as pool:
            for path, rec in zip(todo, pool.map(_check_one, [(p, usage, ruleset, str(root), max_bytes) for p in todo],
                                                    chunksize=4),
                                 strict=True):
                cache.put(rec)
                run.records[path] = rec
                run.checked.append(path)
    return run
