"""The telemetry chart of one run for the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from markupsafe import Markup


def telemetry_chart(run_dir: Path, run: dict[str, Any]) -> Markup | None:
    return None
