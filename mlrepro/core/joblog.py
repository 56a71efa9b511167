"""``python -m mlrepro.core.joblog LOG STATUS``: what a failed step's shell line runs after it (``|| ...``).

It prints the end of the step's log to stderr (Snakemake's own, on the terminal), or, where the log is
empty or missing, why: a step that failed on a full disk could not write its own reason into its log, so
the free space of the file system holding the log is named. Exits non-zero (STATUS, or 1).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TAIL_BYTES = 16 << 10  # the log is the step's own output: bounded on the terminal


def explain(log: Path, status: int) -> str:
    try:
        size = log.stat().st_size
    except OSError as e:
        size, missing = 0, e.strerror
    else:
        missing = None
    if size:
        with log.open("rb") as f:
            f.seek(max(0, size - TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
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


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    log, status = Path(args[0]), int(args[1]) if len(args) > 1 and args[1].isdigit() else 1
    sys.stderr.write(explain(log, status))
    sys.exit(status or 1)


if __name__ == "__main__":
    main()
