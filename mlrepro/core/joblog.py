"""What a failed job puts on Snakemake's stderr (mlrepro/jobs.py): the end of its log, or, where the log is empty or
missing, why: a step that failed on a full disk could not write its own reason into its log, so the free space of
the file system holding the log is named.
"""

from __future__ import annotations

import os
from pathlib import Path

TAIL_BYTES = 16 << 10  # the log is the step's own output: bounded on the terminal


def tail(log: Path, limit: int = TAIL_BYTES) -> str:
    """The last ``limit`` bytes of ``log`` as text ('' where it is empty or missing)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def explain(log: Path, status: int) -> str:
    try:
        size = log.stat().st_size
    except OSError as e:
        size, missing = 0, e.strerror
    else:
        missing = None
    if size:
        return tail(log)
    folder = log.parent if log.parent.exists() else Path(os.path.abspath(log)).anchor
    try:
        st = os.statvfs(folder)
        free = st.f_bavail * st.f_frsize
        inodes = st.f_favail
    except OSError:
        free = inodes = -1
    state = f"missing ({missing})" if missing else "empty"
    why = (f"the file system holding it has {free} bytes free" + (" and no free inodes" if inodes == 0 else "")
           + ("; it is full (ENOSPC), so the step could not write its error there: free space and run again"
              if free == 0 or inodes == 0 else ""))
    if free < 0:
        why = "the file system holding it cannot be asked for its free space"
    return f"the step exited with status {status} and its log {log} is {state}: {why}\n"
