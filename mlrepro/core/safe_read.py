"""Reading untrusted files (packages, recipes) with bounds: every failure is a clear :class:`UnsafeInput`.

A file from a package may be a symlink to /dev/zero or out of the package, a FIFO (opening it for reading
blocks), a huge sparse file, or JSON nested deeper than Python's recursion limit. These helpers read
regular files only, inside a root when one is given, up to a size limit, and parse JSON to a depth limit:
no hang, no MemoryError, no RecursionError, and the message names the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from mlrepro.core.errors import MlreproError

# Far above any real result log, provenance manifest or system description (a few MB at most).
DEFAULT_MAX_BYTES = 256 << 20
# Far above any real manifest or MLLOG event (under 10 levels); far below Python's recursion limit.
DEFAULT_MAX_DEPTH = 100


class UnsafeInput(MlreproError, ValueError):
    """A file not read (not a regular file, outside its root, too large) or not parsed (too deep)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def refusal(path: Path, root: Path | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES,
            root_label: str | None = None, limit_hint: str = "") -> str | None:
    """Why ``path`` is not read, as a verdict without its name (None: a regular file, inside ``root`` when
    given, within ``max_bytes``). ``root_label`` names the root in the verdict ("the package"); ``limit_hint``
    says how to raise the size limit."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        if root is not None and not Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root)):
            return f"a symlink out of {root_label or root} (-> {os.readlink(path)}); not read"
        try:
            st = os.stat(path)
        except OSError:
            return f"a dangling symlink (-> {os.readlink(path)})"
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file ({_kind(st.st_mode)}); not read"
    if max_bytes is not None and st.st_size > max_bytes:
        return f"{st.st_size} bytes, over the limit of {max_bytes}{limit_hint}; not read"
    return None


def problem(path: Path, root: Path | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES) -> str | None:
    """Why ``path`` is not read, naming it (None: it is read)."""
    why = refusal(path, root, max_bytes)
    return None if why is None else f"{path}: {why}"


def read_bytes(path: Path, root: Path | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES) -> bytes:
    """The bytes of a regular file (inside ``root`` when given), at most ``max_bytes``; else UnsafeInput."""
    if why := problem(path, root, max_bytes):
        raise UnsafeInput(why)
    # O_NONBLOCK: an entry swapped for a FIFO after the check must not hang; the fstat judges what was opened.
    try:
        fd = os.open(os.path.realpath(path), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise UnsafeInput(f"{path}: cannot be opened ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeInput(f"{path}: not a regular file ({_kind(mode)}); not read")
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise UnsafeInput(f"{path}: over the limit of {max_bytes} bytes; not read")
    return data


def read_text(path: Path, root: Path | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES) -> str:
    try:
        return read_bytes(path, root, max_bytes).decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnsafeInput(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _depth(value: Any, limit: int) -> int:
    """The nesting depth of a parsed JSON value, without recursion; stops counting past ``limit``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def loads_json(text: str | bytes, what: str, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """``json.loads`` that raises UnsafeInput naming ``what`` for JSON that is invalid or nested deeper than
    ``max_depth`` (callers and the values' later users may recurse: the limit keeps them far from the stack's)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise UnsafeInput(f"{what}: JSON nested too deep to read (limit {max_depth} levels)") from None
    except ValueError as e:  # JSONDecodeError, and bytes that are not UTF-8
        raise UnsafeInput(f"{what}: not valid JSON ({e})") from None
    if _depth(value, max_depth) > max_depth:
        raise UnsafeInput(f"{what}: JSON nested deeper than {max_depth} levels; not read")
    return value


def read_json(path: Path, root: Path | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES,
              max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """A JSON file read with :func:`read_bytes`'s bounds and parsed with :func:`loads_json`'s."""
    return loads_json(read_bytes(path, root, max_bytes), str(path), max_depth)
