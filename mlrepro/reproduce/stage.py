"""A runnable copy of the package's implementation folder: what a run writes stays out of the audited package.

Only regular files, folders and symlinks that stay inside the implementation folder are copied; anything
else (a device, a FIFO, a socket, a link out of the folder) stops the staging naming the entry, before
anything is copied: a character device would otherwise be read until the disk is full.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from mlrepro.core import atomic
from mlrepro.reproduce.errors import ReproduceError

_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc",)


def _inside(link: Path, root: Path) -> bool:
    """Whether the symlink ``link`` points inside ``root``, judged on its text and on where it leads."""
    target = os.readlink(link)
    lexical = Path(os.path.normpath(link.parent / target))
    return (not os.path.isabs(target) and lexical.is_relative_to(root)
            and Path(os.path.realpath(link)).is_relative_to(os.path.realpath(root)))


def survey(folder: Path) -> tuple[list[tuple[Path, str]], list[str]]:
    """Every entry to copy (relative path, "dir" | "file" | "link"), and the others, each named with why."""
    folder = Path(os.path.abspath(folder))
    out: list[tuple[Path, str]] = []
    refused: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):  # does not descend into symlinked folders
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in dirnames + sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(folder)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                if _inside(path, folder):
                    out.append((rel, "link"))
                else:
                    refused.append(f"{rel} (a symlink out of {folder.name}/, -> {os.readlink(path)})")
            elif stat.S_ISDIR(mode):
                out.append((rel, "dir"))
            elif stat.S_ISREG(mode):
                if not name.endswith(_SKIP_SUFFIXES):
                    out.append((rel, "file"))
            else:
                refused.append(f"{rel} (not a regular file)")
    return out, refused


def listing(items: list[str], shown: int = 20) -> str:
    """Items joined for one message; past ``shown`` they are counted (a hostile package may hold millions)."""
    return "; ".join(items[:shown]) + (f" (and {len(items) - shown} more)" if len(items) > shown else "")


def stage(folder: Path, dest: Path) -> None:
    """Copy ``folder`` (the package's implementation) to ``dest``, atomically; the package is only read."""
    copy, refused = survey(folder)
    if refused:
        raise ReproduceError(f"The implementation folder {folder} holds entries that are not staged: "
                             f"{listing(refused)}. A package's implementation holds regular files, folders and "
                             "links inside itself; remove the others.")
    with atomic.atomic_dir(dest) as tmp:
        for rel, kind in copy:
            src, dst = folder / rel, tmp / rel
            if kind == "dir":
                dst.mkdir()
            elif kind == "link":
                dst.symlink_to(os.readlink(src))
            else:
                # O_NOFOLLOW and a regular-file check on what was opened: an entry swapped after the listing
                # is refused, not followed
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                with os.fdopen(fd, "rb") as fin:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        raise ReproduceError(f"{src}: changed into something not a regular file while staged")
                    with dst.open("xb") as fout:
                        shutil.copyfileobj(fin, fout)
                shutil.copymode(src, dst)
