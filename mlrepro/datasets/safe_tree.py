"""A destination folder written only through directory descriptors: nothing is ever written through a link.

A path in the tree is a tuple of plain names (no ``''``, ``.`` or ``..``; the caller judges names before).
Each folder on the way is opened from its parent's descriptor with ``O_NOFOLLOW``, so a symbolic link
anywhere on the way is refused, never followed, however deep the path (no PATH_MAX, no ``realpath``).
Files are created with ``O_EXCL | O_NOFOLLOW`` after whatever non-folder stood at the name is removed, so
a later entry never writes into an earlier file or through an earlier link. The links the tree makes are
judged once everything is written (``escaping_links``): followed as the kernel would, through each other.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import BinaryIO

from mlrepro.core.errors import MlreproError

Parts = tuple[str, ...]

CHUNK = 1 << 20
MAX_HOPS = 40  # the kernel's limit on links followed in one lookup (MAXSYMLINKS)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def shown(name: str, keep: int = 160) -> str:
    """``name`` quoted for a message, its middle cut when long (an archive's names may be megabytes)."""
    if len(name) <= 2 * keep:
        return repr(name)
    return f"{name[:keep]!r}...({len(name) - 2 * keep} characters)...{name[-keep:]!r}"


class WriteRefused(MlreproError, ValueError):
    """A name in the way is a link or a file where a folder is needed, or a folder where a file is."""


class Tree:
    """``root`` (made if missing) and everything below it, written through descriptors."""

    def __init__(self, root: os.PathLike[str] | str) -> None:
        os.makedirs(root, exist_ok=True)
        self._root = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        # the folders of the last path used, open: an archive lists a folder's files together
        self._chain: list[tuple[str, int]] = []
        self.links: list[tuple[Parts, str]] = []  # every link made, with what made it (for messages)

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for _, fd in reversed(self._chain):
            os.close(fd)
        self._chain = []
        os.close(self._root)

    def folder(self, parts: Parts, create: bool = True) -> int:
        """The descriptor of folder ``parts`` (valid until the next call), made if missing and ``create``."""
        keep = 0
        while keep < min(len(parts), len(self._chain)) and self._chain[keep][0] == parts[keep]:
            keep += 1
        for _, fd in reversed(self._chain[keep:]):
            os.close(fd)
        del self._chain[keep:]
        for name in parts[keep:]:
            parent = self._chain[-1][1] if self._chain else self._root
            self._chain.append((name, _open_folder(parent, name, create)))
        return self._chain[-1][1] if self._chain else self._root

    def mkdir(self, parts: Parts) -> None:
        self.folder(parts)

    def write_file(self, parts: Parts, data: BinaryIO, mode: int, mtime: float | None,
                   take: Callable[[int], None]) -> None:
        """Copy ``data`` to a new file ``parts``; ``take(n)`` is called before each ``n`` bytes are written."""
        parent = self.folder(parts[:-1])
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(parts[-1], flags, 0o600, dir_fd=parent)
        except FileExistsError:  # a later member of the same name, as tar allows: it replaces the first
            _clear(parent, parts)
            fd = os.open(parts[-1], flags, 0o600, dir_fd=parent)
        with open(fd, "wb", buffering=0, closefd=True) as out:
            os.fchmod(fd, mode)
            while chunk := data.read(CHUNK):
                take(len(chunk))
                out.write(chunk)
            if mtime is not None:
                os.utime(fd, (mtime, mtime))

    def symlink(self, parts: Parts, target: str, made_by: str) -> None:
        parent = self.folder(parts[:-1])
        _clear(parent, parts)
        os.symlink(target, parts[-1], dir_fd=parent)
        self.links.append((parts, made_by))

    def hardlink(self, parts: Parts, source: Parts) -> None:
        """A hard link to ``source``, which must be a regular file in the tree (a link to a symbolic link
        would carry its relative target to another folder)."""
        src = os.dup(self.folder(source[:-1], create=False))
        try:
            if not stat.S_ISREG(os.lstat(source[-1], dir_fd=src).st_mode):
                raise WriteRefused(f"links to {shown('/'.join(source))}, which is not a regular file")
            parent = self.folder(parts[:-1])
            _clear(parent, parts)
            os.link(source[-1], parts[-1], src_dir_fd=src, dst_dir_fd=parent, follow_symlinks=False)
        finally:
            os.close(src)

    def open_file(self, parts: Parts) -> BinaryIO:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.folder(parts[:-1], False))
        return os.fdopen(fd, "rb")

    def unlink(self, parts: Parts) -> None:
        os.unlink(parts[-1], dir_fd=self.folder(parts[:-1], create=False))

    def escaping_links(self) -> list[str]:
        """What made each link that, followed as the kernel follows it, leads outside the root (or loops)."""
        return [made_by for parts, made_by in self.links if self._escapes(parts)]

    def _escapes(self, link: Parts) -> bool:
        where, pending, hops = list(link[:-1]), [link[-1]], 0
        while pending:
            name = pending.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                if not where:
                    return True
                where.pop()
                continue
            try:
                parent = self.folder(tuple(where), create=False)
                mode = os.lstat(name, dir_fd=parent).st_mode
            except (OSError, WriteRefused):
                return False  # a missing name or a file on the way: the kernel's lookup stops here too
            if stat.S_ISLNK(mode):
                hops += 1
                target = os.readlink(name, dir_fd=parent)
                if hops > MAX_HOPS or target.startswith("/"):
                    return True
                pending[:0] = target.split("/")
                continue
            where.append(name)
        return False


def _open_folder(parent: int, name: str, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = "a symbolic link" if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode) else "not a folder"
            raise WriteRefused(f"is under {name!r}, which is {kind}; nothing is written through a link") from None
        raise
    os.mkdir(name, dir_fd=parent)
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _clear(parent: int, parts: Parts) -> None:
    """Remove what stands at ``parts`` (a file or a link, never followed) so a new entry is made, not reused."""
    try:
        mode = os.lstat(parts[-1], dir_fd=parent).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise WriteRefused(f"would replace the folder {shown('/'.join(parts))}")
    os.unlink(parts[-1], dir_fd=parent)
