"""Names from a config that become paths stay inside their folder."""

from __future__ import annotations

from pathlib import Path


def inside(folder: Path, name: str) -> Path:
    """``folder / name`` resolved; ValueError when it leaves ``folder`` (``..``, an absolute name, a symlink)."""
    base = folder.resolve()
    path = (base / name).resolve()
    if path == base or not path.is_relative_to(base):
        raise ValueError(f"{name!r} is not a name inside {folder}")
    return path
