"""Safe extraction: a member with an absolute path, a ``..`` component, a link out of the target or a
device/FIFO entry is refused, naming the archive and the member.

Python's tarfile ``data`` filter would quietly strip a leading ``/``; here that is refused too, before the
filter (which still guards every link) sees the member. zipfile quietly rewrites such names, so zip
members get the same checks by hand.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath


class UnsafeArchiveError(RuntimeError):
    pass


def _check_name(archive: Path, name: str) -> None:
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith("\\") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an absolute path; refusing to extract")
    if ".." in path.parts or ".." in PurePosixPath(name.replace("\\", "/")).parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r} has a '..' component; refusing to extract")


def extract_tar(archive: Path, dest: Path) -> list[Path]:
    """Extract ``archive`` into ``dest`` member by member (one streaming pass); return the files made."""
    dest.mkdir(parents=True, exist_ok=True)
    made = []
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            _check_name(archive, member.name)
            if member.ischr() or member.isblk() or member.isfifo() or not (member.isfile() or member.isdir()
                                                                          or member.issym() or member.islnk()):
                raise UnsafeArchiveError(f"{archive}: member {member.name!r} is a device or FIFO entry; "
                                         "refusing to extract")
            if member.issym() or member.islnk():
                base = PurePosixPath(member.name).parent if member.issym() else PurePosixPath()
                target = os.path.normpath(base / member.linkname)
                if PurePosixPath(member.linkname).is_absolute() or target == ".." or target.startswith("../"):
                    raise UnsafeArchiveError(f"{archive}: member {member.name!r} links to {member.linkname!r}, "
                                             "outside the target folder; refusing to extract")
            try:
                tar.extract(member, dest, filter="data")
            except tarfile.FilterError as e:
                raise UnsafeArchiveError(f"{archive}: member {member.name!r}: {e}; refusing to extract") from None
            if member.isfile():
                made.append(dest / member.name)
    return made


def extract_zip(archive: Path, dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    made = []
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:  # every member is checked before anything is written
            _check_name(archive, info.filename)
            mode = info.external_attr >> 16  # Unix mode; its type bits are 0 when the zip did not set them
            if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "a device or FIFO entry"
                raise UnsafeArchiveError(f"{archive}: member {info.filename!r} is {kind}; refusing to extract")
        for info in infos:
            made.append(Path(zf.extract(info, dest)))
    return [p for p in made if p.is_file()]


def extract(archive: Path, dest: Path) -> list[Path]:
    if zipfile.is_zipfile(archive):
        return extract_zip(archive, dest)
    if tarfile.is_tarfile(archive):
        return extract_tar(archive, dest)
    raise UnsafeArchiveError(f"{archive}: neither a tar nor a zip archive")
