"""Atomic file outputs: a killed step never leaves a file that looks complete."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# mkstemp/mkdtemp create private (0600/0700) entries; results are meant to be shared like any file: readable as the
# umask allows, but writable by this user only, whatever the umask (002 included), since later steps trust them
# (mlrepro/core/untrusted_dir.py read_record).
_FILE_MODE = 0o666 & ~_umask() & ~0o022
_DIR_MODE = 0o777 & ~_umask()


def temp_name(path: str | os.PathLike[str]) -> Path:
    """A hidden sibling of ``path`` that no other process uses: two invocations (or a killed one's
    leftovers) never write, rename or delete each other's temporary files."""
    final = Path(path)
    return final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.part")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling of ``path``; it is renamed onto ``path`` only on success."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".part", dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    tmp_path.chmod(_FILE_MODE)
    try:
        yield tmp_path
        os.replace(tmp_path, final)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` as UTF-8. A name read from disk that is not UTF-8 reaches text as lone surrogates (Python's
    surrogateescape); it is written escaped (``\\udcff``), so that an odd file name never stops a step."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8", errors="backslashreplace")


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Build a directory under a temporary name and swap it into place only on success."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".part", dir=final.parent))
    tmp.chmod(_DIR_MODE)
    try:
        yield tmp
        if final.exists():
            old = temp_name(final)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
