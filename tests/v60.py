"""The mlperf-logging release that judges the v6.0 suite (6.0.0-rc6), from ``../shared/data`` as a test oracle."""

from __future__ import annotations

import tarfile
from pathlib import Path

from tests import rounds
from tests.conftest import require

RELEASES = rounds.DATA / "mlperf_logging_by_round.tar.xz"
TAG = "6.0.0-rc6"


def extract_release(dest: Path, tag: str = TAG) -> Path:
    """A folder of releases named by tag holding ``tag`` alone (as ``logging_release`` takes it); ``dest``."""
    require(RELEASES.is_file(), f"{RELEASES} is absent")
    with tarfile.open(RELEASES) as tar:
        tar.extractall(dest, members=[m for m in tar.getmembers() if Path(m.name).parts[:1] == (tag,)],
                       filter="data")
    return dest
