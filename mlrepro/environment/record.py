"""Record the software environment the runs use (through their engine) and the host they run on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlrepro.config import system_name
from mlrepro.containers.lock import image_ref
from mlrepro.core import atomic, probe
from mlrepro.core.job import Job
from mlrepro.engines import engine_for
from mlrepro.environment import system_desc


def record(sub: dict[str, Any], image_record: Path | None, locked: bool) -> dict[str, Any]:
    """The environment of ``sub`` (the pipeline's environment spec: org, system, division, status, threads,
    device): natively this Python's, else the image's its build record names."""
    software = engine_for("native", image_record).describe(image_ref(image_record, locked=locked)
                                                            if image_record else None)
    return {
        "engine": software,
        "host": probe.host(),
        "system_desc": system_desc.describe(sub["org"], sub["division"], sub["status"],
                                            system_name(sub["system"]), sub["threads"], sub["device"], software,
                                            mini=sub.get("mini", True), frameworks=sub.get("frameworks")),
    }


def job(job: Job) -> None:
    atomic.write_json(job.output.first, record(job.params["spec"], job.input.get("image"), job.params["locked"]))
