"""Writing into a folder that untrusted code can touch (a run folder: its code runs there, in a container it is
mounted read-write), without following what that code planted there.

A run's ``run_and_time.sh`` can leave a symlink (or, natively, a hard link) where the pipeline writes next: its log,
the ledger, ``result.txt``, the telemetry folder. A plain ``open`` writes through it into any file of the user
(``~/.bashrc``, ``authorized_keys``). Here every component below the folder is opened with ``O_NOFOLLOW`` relative to
its parent's descriptor; a file is either written under a fresh name and renamed into place (a link at the name is
replaced, never followed), or opened in place and then checked (``fstat``) to be the regular file this user made,
with one link. Anything else stops the step with :class:`PlantedLink`, naming the entry: no target changes.

The folder itself (the path the caller gives) is the pipeline's own, made by it in a folder the code never sees; its
last component is still opened without following.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlrepro.core.errors import MlreproError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_MODE = 0o644  # records and logs: readable by others, writable by this user only (whatever the umask)
_DIR_MODE = 0o755


class PlantedLink(MlreproError, RuntimeError):
    """An entry of an untrusted folder is not what the pipeline made (a link, another user's file, a FIFO)."""


def _kind(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if stat.S_ISDIR(st.st_mode):
        return "a folder"
    if stat.S_ISREG(st.st_mode):
        return "a regular file"
    return "a special file (FIFO, device or socket)"


def _refuse(path: Path, what: str) -> PlantedLink:
    return PlantedLink(f"{path}: {what}. The run's own code can write into this folder; mlrepro follows no link and "
                       "writes into no file it did not make there, so this step stops and nothing was written through "
                       "it. Inspect the entry, remove it, and run again (reproduce untrusted packages in a container)")


def _describe(dir_fd: int, name: str) -> str:
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError as e:
        return f"cannot be opened ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        try:
            return f"a symlink (-> {os.readlink(name, dir_fd=dir_fd)})"
        except OSError:
            return "a symlink"
    return f"{_kind(st)}, owned by uid {st.st_uid}"


def open_dir(folder: Path) -> int:
    """A descriptor of ``folder`` (made where missing), its last component not followed."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return os.open(folder, _DIR)
    except OSError as e:
        raise _refuse(folder, f"not a folder of this pipeline ({e.strerror})") from None


def _subdir(dir_fd: int, name: str, where: Path) -> int:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, _DIR_MODE, dir_fd=dir_fd)
    try:
        fd = os.open(name, _DIR, dir_fd=dir_fd)
    except OSError:
        raise _refuse(where / name, f"expected a folder, found {_describe(dir_fd, name)}") from None
    if os.fstat(fd).st_uid != os.geteuid():
        os.close(fd)
        raise _refuse(where / name, f"a folder of another user ({_describe(dir_fd, name)})")
    return fd


@contextlib.contextmanager
def parent(root: Path, rel: str | os.PathLike[str]) -> Iterator[tuple[int, str, Path]]:
    """(descriptor of the folder holding ``root/rel``, its last name, the full path), each folder below ``root``
    opened without following links (and made where missing)."""
    parts = Path(rel).parts
    if not parts or any(p in ("", ".", "..") or "/" in p for p in parts) or Path(rel).is_absolute():
        raise ValueError(f"{rel!r}: not a relative path below {root}")
    fd = open_dir(root)
    where = root
    try:
        for name in parts[:-1]:
            sub = _subdir(fd, name, where)
            os.close(fd)
            fd, where = sub, where / name
        yield fd, parts[-1], root / rel
    finally:
        os.close(fd)


def check_fd(fd: int, path: Path) -> os.stat_result:
    """``fstat`` of an opened entry: a regular file of this user with one link; PlantedLink otherwise."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, f"expected a regular file, found {_kind(st)}")
    if st.st_uid != os.geteuid():
        raise _refuse(path, f"a file of another user (uid {st.st_uid})")
    if st.st_nlink != 1:
        raise _refuse(path, f"a file with {st.st_nlink} hard links (another name of it may be any file of yours)")
    return st


def open_append(root: Path, rel: str | os.PathLike[str], *, read: bool = False) -> int:
    """``root/rel`` opened to append (created where missing), after the checks of :func:`check_fd`."""
    with parent(root, rel) as (dfd, name, path):
        flags = (os.O_RDWR if read else os.O_WRONLY) | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(name, flags | os.O_CLOEXEC, _FILE_MODE, dir_fd=dfd)
        except OSError:
            raise _refuse(path, f"expected a regular file, found {_describe(dfd, name)}") from None
    try:
        check_fd(fd, path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create(root: Path, rel: str | os.PathLike[str]) -> int:
    """``root/rel`` as a new, empty file opened to append: whatever was at the name is removed first (a link
    itself, never its target)."""
    with parent(root, rel) as (dfd, name, path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dfd)
        try:
            return os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                           _FILE_MODE, dir_fd=dfd)
        except OSError as e:
            raise _refuse(path, f"cannot be made anew ({e.strerror})") from None


def unlink(root: Path, rel: str | os.PathLike[str]) -> None:
    """Remove the entry ``root/rel`` where there is one (a link itself, never its target)."""
    with parent(root, rel) as (dfd, name, _), contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dfd)


def write_bytes(root: Path, rel: str | os.PathLike[str], data: bytes) -> None:
    """``data`` written under a fresh hidden name and renamed onto ``root/rel`` (atomic; a link there is replaced)."""
    with parent(root, rel) as (dfd, name, _):
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.part"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE,
                     dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise


def write_text(root: Path, rel: str | os.PathLike[str], text: str) -> None:
    write_bytes(root, rel, text.encode("utf-8", errors="backslashreplace"))


def write_json(root: Path, rel: str | os.PathLike[str], obj: Any) -> None:
    write_text(root, rel, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_bytes(root: Path, rel: str | os.PathLike[str], max_bytes: int, *, ours: bool = False) -> bytes:
    """The bytes of the regular file ``root/rel`` (no link followed, a FIFO never waited on), at most ``max_bytes``;
    ``ours``: it must also be this user's, with one link (:func:`check_fd`). PlantedLink otherwise;
    FileNotFoundError where there is nothing."""
    with parent(root, rel) as (dfd, name, path):
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file") from None
        except OSError:
            raise _refuse(path, f"expected a regular file, found {_describe(dfd, name)}") from None
    with os.fdopen(fd, "rb") as f:
        st = check_fd(fd, path) if ours else os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, f"expected a regular file, found {_kind(st)}")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _refuse(path, f"over {max_bytes} bytes")
    return data


def _defuse(path: str) -> str:
    """Remove the setuid and setgid bits of the regular file ``path`` (no link followed); what happened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
        finally:
            os.close(fd)
    except OSError as e:
        return f"its bits could not be removed: {e.strerror}; remove it"
    return "its bits removed"


def planted(root: Path) -> list[str]:
    """What ``root`` holds that the pipeline never makes there, as ``path: what`` lines, without following anything:
    symlinks, files with more than one hard link, FIFOs, devices and sockets, setuid and setgid files (a container's
    root can leave one, root's on the host: their bits are removed here). (A container's user may own its files
    under another uid: ownership is checked where a file is opened in place, :func:`check_fd`.)"""
    found: list[str] = []
    stack = [root]
    while stack and len(found) < 50:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as e:
            found.append(f"{folder}: cannot be listed ({e.strerror})")
            continue
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            what = None
            if stat.S_ISLNK(st.st_mode):
                what = f"a symlink (-> {os.readlink(entry.path)})"
            elif stat.S_ISDIR(st.st_mode):
                stack.append(Path(entry.path))
            elif not stat.S_ISREG(st.st_mode):
                what = _kind(st)
            elif st.st_nlink != 1:
                what = f"a file with {st.st_nlink} hard links"
            elif st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                what = f"a setuid or setgid file of uid {st.st_uid} ({_defuse(entry.path)})"
            if what:
                found.append(f"{entry.path}: {what}")
    return found


# --- records: files a step wrote that a later step trusts (capture records, launch files, image records). An output
# folder may be group-writable (umask 002): a record is trusted only when it is this user's regular file, with one
# link, writable by no one else; only this user (or root) can make such a file, so its content is the step's.


def record_problem(st: os.stat_result) -> str | None:
    """Why an entry (its lstat or fstat) is not a record this user wrote; None when it is."""
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file ({_kind(st)})"
    if st.st_uid != os.geteuid():
        return f"written by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    if st.st_nlink != 1:
        return f"a file with {st.st_nlink} hard links"
    if st.st_mode & 0o022:
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def read_record(path: Path, max_bytes: int) -> bytes:
    """The bytes of a record this user wrote (see above); PlantedLink saying why it is not trusted otherwise, and
    FileNotFoundError (with ``path`` as given) where there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(2, "No such file or directory", str(path)) from None
    except OSError as e:
        why = "a symlink" if os.path.islink(path) else f"cannot be opened ({e.strerror})"
        raise PlantedLink(f"{path}: {why}; not trusted. Remove it, and the step that writes it runs again") from None
    with os.fdopen(fd, "rb") as f:
        if why := record_problem(os.fstat(fd)):
            raise PlantedLink(f"{path}: {why}; a record a later step trusts must be yours alone, so it is not "
                              "used. Remove it, and the step that writes it runs again (one you wrote yourself: "
                              "chmod go-w it; an output folder shared with a group: see docs/security.md)")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise PlantedLink(f"{path}: over {max_bytes} bytes; not a record of this pipeline. Remove it")
    return data
