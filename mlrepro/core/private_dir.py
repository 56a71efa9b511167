"""Per-user runtime state (sockets, pid files, shims) only in folders this user owns with mode 0700.

A cluster login node is shared: a predictable path in ``/tmp`` may have been made first by another user,
who then owns what runs from it. So the base is ``$XDG_RUNTIME_DIR`` (systemd makes it per user, 0700)
where set (``mlrepro/`` below it), else ``$XDG_CACHE_HOME`` or ``~/.cache`` (``mlrepro/runtime/`` below it: a
cache folder ``mlrepro/`` that another program, or an older mlrepro, made with mode 755 is a parent like
``~/.cache`` itself, not the private folder); the private folder and each purpose's folder below it are made
0700 and checked after creation and on every use: a folder that is a symlink, not a folder, owned by another
user or open to group or others is refused with :class:`PrivateDirError` naming it and its owner. A parent that
another user can write (or that belongs to another user) is refused the same way.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from pathlib import Path

from mlrepro.core.errors import MlreproError


class PrivateDirError(MlreproError, RuntimeError):
    pass


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check(folder: Path, *, private: bool = True) -> Path:
    """``folder`` when it is a real folder owned by this user, not writable by group or others (with
    ``private``: no access for them at all); PrivateDirError naming it and its owner otherwise."""
    try:
        st = os.lstat(folder)
    except OSError as e:
        raise PrivateDirError(f"{folder}: cannot be used for runtime state ({e.strerror})") from None
    me = os.geteuid()
    what = None
    if stat.S_ISLNK(st.st_mode):
        what = f"a symlink (-> {os.readlink(folder)}), owned by {_owner(st.st_uid)}"
    elif not stat.S_ISDIR(st.st_mode):
        what = f"not a folder, owned by {_owner(st.st_uid)}"
    elif st.st_uid != me:
        what = f"owned by {_owner(st.st_uid)}, not by {_owner(me)}"
    elif st.st_mode & (0o077 if private else 0o022):
        fix = "chmod 700" if private else "chmod go-w"
        what = (f"owned by {_owner(st.st_uid)} with mode {stat.S_IMODE(st.st_mode):o}: open to other users (a "
                f"folder made under umask 002 is group-writable; `{fix} {folder}` fixes it)")
    if what:
        raise PrivateDirError(
            f"{folder}: {what}. mlrepro keeps its runtime state (sockets, pid files, the warm start's shim) only "
            f"in a folder of your own with mode 700: remove or fix {folder}, or set XDG_RUNTIME_DIR to a folder "
            "of yours")
    return folder


def base() -> Path:
    """The folder under which this user's runtime folders live (made 0700 where missing)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        check(Path(runtime), private=False)
        return make(Path(runtime) / "mlrepro")
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    if not root.is_absolute():
        raise PrivateDirError(f"XDG_CACHE_HOME={root}: not an absolute path")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    check(root, private=False)  # a home's .cache may be 755; never writable by others, never another user's
    cache = root / "mlrepro"
    with contextlib.suppress(FileExistsError):
        cache.mkdir(mode=0o700)
    check(cache, private=False)  # likewise the cache's mlrepro/: the private folder is the one below it
    return make(cache / "runtime")


def make(folder: Path) -> Path:
    """``folder`` made (mode 0700) where missing, then checked: this user's, private; its parent must be
    this user's and not writable by others (else the folder could be swapped)."""
    check(folder.parent, private=False)
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    return check(folder)


def runtime_dir(name: str, root: Path | None = None) -> Path:
    """This user's private folder ``name`` for runtime state, under ``root`` (default :func:`base`); ``root``
    itself must be this user's and not writable by others."""
    return make((root if root is not None else base()) / name)
