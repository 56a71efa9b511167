"""Config files already sourced: the variables bash captured, reused while nothing they could read changed.

Sourcing a vendor's config file costs a bash and the commands it runs (NVIDIA's run ``readlink``, ``dirname``
and source a shared ``*_common.sh``): about 8 ms each, and every Snakemake invocation plans again, each job's
too on a cluster. A submission of 10 systems x 8 benchmarks sources about 40 (benchmarks/planning_scale.py).

The key is everything a capture reads as the pipeline sees it: the config file's path, every file of its
implementation folder (path, size, mtime, inode: the folder is the unit the pipeline re-runs on, as in the
launch digest), the clean environment, the bash binary and the host. A config file that reads files outside
its folder is not followed there: touch a file of its folder, or remove the cache folder, after changing them.
An entry that cannot be read is captured again; a cache folder that cannot be written is only not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

from mlrepro.core import atomic

VERSION = 1  # of what capture() returns: a change of its rules makes every older entry a miss


def folder() -> Path:
    """Where entries are kept: ``$XDG_CACHE_HOME/mlrepro/config-captures`` (else ``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mlrepro" / "config-captures"


def key(config: Path, clean_env: dict[str, str]) -> str:
    h = hashlib.sha256()
    bash = shutil.which("bash", path=clean_env.get("PATH")) or "bash"
    real = config.resolve()  # what bash sources (a link's target), from the link's folder
    h.update(json.dumps([VERSION, str(config), str(real), _stamp(str(real)), clean_env, bash, _stamp(bash),
                         socket.gethostname()]).encode(errors="surrogateescape"))
    for rel, st in _files(str(config.parent)):
        h.update(f"{rel}\0{_triple(st)}\n".encode(errors="surrogateescape"))
    return h.hexdigest()


def _files(top: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every file below ``top`` with its stat, in a fixed order (linked folders not followed): scandir's entries
    carry their type, so only files cost a stat (a folder of NVIDIA's has about 130; planning keys about 40)."""
    pending = [""]
    while pending:
        rel = pending.pop()
        with os.scandir(f"{top}/{rel}" if rel else top) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                name = f"{rel}/{entry.name}" if rel else entry.name
                if entry.is_dir(follow_symlinks=False):
                    pending.append(name)
                else:
                    yield name, _stat(entry)


def _stat(entry: os.DirEntry[str]) -> os.stat_result:
    try:
        return entry.stat()  # a link's target: what bash reads through it
    except OSError:
        return entry.stat(follow_symlinks=False)  # a dangling link: the link itself


def _stamp(path: str) -> str:
    try:
        return _triple(os.stat(path))
    except OSError:
        return "-"


def _triple(st: os.stat_result) -> str:
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"  # as datasets/stamps.py stamps a file


def get(entry: str) -> dict[str, str] | None:
    try:
        env = json.loads((folder() / f"{entry}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        return None
    return env


def put(entry: str, env: dict[str, str]) -> None:
    with contextlib.suppress(OSError):  # a read-only home: every invocation sources again, as before the cache
        # ~/.cache/mlrepro is also where the warm start keeps its sockets (mlrepro/core/private_dir.py), which
        # refuses it unless it is mode 0700: made so here, where planning usually makes it first
        folder().parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic.write_text(folder() / f"{entry}.json", json.dumps(env, sort_keys=True))
