"""Safe extraction of tar, zip and gzip files: nothing is written outside the destination, and a
decompression bomb stops at a byte budget.

Every member is judged by its name alone (lexically) before it is written: an absolute path, a ``..``
component, a symbolic link whose target leaves the destination, a hard link to a name outside it, a device or
a FIFO is refused, naming the archive and the member. Writing goes through directory descriptors
(mlrepro/datasets/safe_tree.py), so nothing is written through a link, and the links an archive made are
judged again once the whole folder is written, followed through each other (``check_links``).
tarfile's ``data`` filter is not relied on: its ``realpath`` stops past PATH_MAX on Python before 3.11.13.
"""

from __future__ import annotations

import contextlib
import gzip
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from mlrepro.core.errors import MlreproError
from mlrepro.datasets.safe_tree import Parts, Tree, WriteRefused, shown

# With no stated size, an archive may expand this many times over (gzip and zip's deflate reach ~1000).
UNSTATED_RATIO = 100
# What each member costs the budget before its bytes: a file system block and its inode. A tar of a million
# empty entries (512 bytes each, or a few bytes compressed) writes no data but exhausts inodes and hours of
# file creation; this bounds the entries as the bytes are bounded (ImageNet's 1.3 M files cost 5 GB of its
# stated 150 GB).
ENTRY_BYTES = 4096


class ArchiveError(MlreproError, RuntimeError):
    pass


class UnsafeArchiveError(ArchiveError):
    pass


class ArchiveTooLargeError(ArchiveError):
    pass


@dataclass
class Budget:
    """The bytes extraction may write: ``source`` says where the limit comes from, ``fix`` how to change it."""

    limit: int
    source: str
    fix: str = ""
    used: int = 0

    def take(self, n: int, archive: str, member: str) -> None:
        self.used += n
        if self.used > self.limit:
            raise ArchiveTooLargeError(
                f"{archive}: member {shown(member)} takes the extracted files past {self.limit} bytes ({self.source}; "
                f"each member counts {ENTRY_BYTES} bytes besides its data); stopped: a decompression bomb"
                f"{', or ' + self.fix if self.fix else ''}")

    def entry(self, archive: str, member: str) -> None:
        """One member made (a file, folder or link), charged ENTRY_BYTES."""
        self.take(ENTRY_BYTES, archive, member)

    def give_back(self, n: int) -> None:
        self.used -= n


def ratio_budget(archives: list[Path], why: str, fix: str = "") -> Budget:
    return Budget(UNSTATED_RATIO * sum(a.stat().st_size for a in archives),
                  f"{UNSTATED_RATIO} x the archives' size, {why}", fix)


def member_parts(archive: str, name: str) -> Parts:
    """The member's path as plain names; an absolute name or a ``..`` is refused (a name of ``.`` is ``()``)."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(f"{archive}: member {shown(name)} has an absolute path; refusing to extract")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts or ("\\" in name and ".." in name.replace("\\", "/").split("/")):
        raise UnsafeArchiveError(f"{archive}: member {shown(name)} has a '..' component; refusing to extract")
    return parts


def _check_symlink(archive: str, member: str, where: Parts, target: str) -> None:
    """Lexically: the target, from the link's folder, stays inside the tree (links on the way: check_links)."""
    depth = -1 if target.startswith("/") else len(where) - 1
    for part in target.split("/"):
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            raise UnsafeArchiveError(f"{archive}: member {shown(member)} links to {shown(target)}, outside the target "
                                     "folder; refusing to extract")


def _hardlink_source(archive: str, member: tarfile.TarInfo) -> Parts:
    """A hard link names another member, from the archive's top: a file in the tree, never outside it."""
    try:
        source = member_parts(archive, member.linkname)
    except UnsafeArchiveError:
        source = ()
    if not source:
        raise UnsafeArchiveError(f"{archive}: member {shown(member.name)} links to {shown(member.linkname)}, "
                                 "outside the target folder; refusing to extract")
    return source


@contextlib.contextmanager
def _member(archive: str, member: str) -> Iterator[None]:
    """Errors while writing one member, named after the archive and the member."""
    try:
        yield
    except WriteRefused as e:
        raise UnsafeArchiveError(f"{archive}: member {shown(member)} {e}; refusing to extract") from None
    except OSError as e:
        raise ArchiveError(f"{archive}: member {shown(member)}: {e.strerror or e}") from e


def _untar(tar: tarfile.TarFile, archive: str, tree: Tree, into: Parts, budget: Budget) -> list[Parts]:
    made = []
    for m in tar:
        where = into + member_parts(archive, m.name)
        if not (m.isdir() or m.isfile() or m.issym() or m.islnk()):
            kind = "a device or FIFO entry" if m.ischr() or m.isblk() or m.isfifo() else f"of unknown type {m.type!r}"
            raise UnsafeArchiveError(f"{archive}: member {shown(m.name)} is {kind}; refusing to extract")
        if not m.isdir() and len(where) == len(into):
            raise UnsafeArchiveError(f"{archive}: member {shown(m.name)} names the target folder itself; refusing")
        budget.entry(archive, m.name)
        with _member(archive, m.name):
            if m.isdir():
                tree.mkdir(where)
            elif m.isfile():
                data = tar.extractfile(m)
                assert data is not None  # a regular member always has data
                with data:  # the data filter's modes: no set-id bits, no group or other write
                    tree.write_file(where, data, (m.mode & 0o755) | 0o600, m.mtime,
                                    lambda n, name=m.name: budget.take(n, archive, name))
                made.append(where)
            elif m.issym():
                _check_symlink(archive, m.name, where, m.linkname)
                tree.symlink(where, m.linkname, f"{archive}: member {shown(m.name)}")
            else:
                tree.hardlink(where, into + _hardlink_source(archive, m))
    return made


def _unzip(zf: zipfile.ZipFile, archive: str, tree: Tree, into: Parts, budget: Budget) -> list[Parts]:
    infos = zf.infolist()
    for info in infos:  # every member is judged before anything is written
        member_parts(archive, info.filename)
        mode = info.external_attr >> 16  # Unix mode; its type bits are 0 when the zip did not set them
        if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
            kind = "a symbolic link" if stat.S_ISLNK(mode) else "a device or FIFO entry"
            raise UnsafeArchiveError(f"{archive}: member {shown(info.filename)} is {kind}; refusing to extract")
    made = []
    for info in infos:
        where = into + member_parts(archive, info.filename)
        budget.entry(archive, info.filename)
        with _member(archive, info.filename):
            if info.is_dir():
                tree.mkdir(where)
                continue
            if len(where) == len(into):
                raise UnsafeArchiveError(f"{archive}: member {shown(info.filename)} names the target folder itself")
            with zf.open(info) as data:
                tree.write_file(where, data, 0o644, None,
                                lambda n, name=info.filename: budget.take(n, archive, name))
            made.append(where)
    return made


def unpack(file: BinaryIO, archive: str, tree: Tree, into: Parts, budget: Budget) -> list[Parts]:
    """Extract the tar or zip ``file`` (named ``archive`` in messages) into ``tree``'s folder ``into``;
    return the files made. The caller runs ``check_links`` once everything is in the tree."""
    if zipfile.is_zipfile(file):
        file.seek(0)
        with zipfile.ZipFile(file) as zf:
            return _unzip(zf, archive, tree, into, budget)
    file.seek(0)
    if not tarfile.is_tarfile(file):
        raise ArchiveError(f"{archive}: neither a tar nor a zip archive")
    file.seek(0)
    with tarfile.open(fileobj=file, mode="r:*") as tar:
        return _untar(tar, archive, tree, into, budget)


def unpack_nested(tree: Tree, inner: Parts, archive: str, budget: Budget) -> None:
    """An archive ``inner`` already in the tree goes into a folder of its name less its suffix, then away."""
    name = f"{archive}, inner {shown('/'.join(inner))}"
    with tree.open_file(inner) as file:
        size = file.seek(0, 2)
        unpack(file, name, tree, (*inner[:-1], PurePosixPath(inner[-1]).stem), budget)
    tree.unlink(inner)
    budget.give_back(size)


def gunzip(archive: Path, tree: Tree, where: Parts, budget: Budget) -> None:
    with gzip.open(archive) as data, _member(str(archive), where[-1]):
        tree.write_file(where, data, 0o644, None, lambda n: budget.take(n, str(archive), where[-1]))


def check_links(tree: Tree) -> None:
    """Every link the tree holds, followed through the others as the kernel would, stays inside it."""
    for made_by in tree.escaping_links():
        raise UnsafeArchiveError(f"{made_by} leads outside the target folder through the archive's other links, "
                                 "or loops; refusing to extract")


def extract(archive: Path, dest: Path, budget: Budget | None = None) -> list[Path]:
    """Extract ``archive`` into ``dest`` (made if missing); return the files made."""
    budget = budget or ratio_budget([archive], "as no limit was given")
    with Tree(dest) as tree, archive.open("rb") as file:
        made = unpack(file, str(archive), tree, (), budget)
        check_links(tree)
    return [dest.joinpath(*parts) for parts in made]
