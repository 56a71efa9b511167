"""Record the software environment the runs use (through their engine) and the host they run on."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlrepro.config import system_name
from mlrepro.containers.lock import image_ref
from mlrepro.core import atomic, probe
from mlrepro.engines import engine_for
from mlrepro.environment import system_desc


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.environment.record", description=__doc__)
    p.add_argument("--engine", default="native", help="without an image record: native")
    p.add_argument("--image-record", type=Path, default=None, help="the image's build record (container engines)")
    p.add_argument("--locked", action="store_true")
    p.add_argument("--spec", type=Path, required=True,
                   help="JSON file: org, system, division, status, threads, device (the pipeline's environment spec)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    sub = json.loads(args.spec.read_text(encoding="utf-8"))
    software = engine_for(args.engine, args.image_record).describe(
        image_ref(args.image_record, locked=args.locked) if args.image_record else None)
    record = {
        "engine": software,
        "host": probe.host(),
        "system_desc": system_desc.describe(sub["org"], sub["division"], sub["status"],
                                            system_name(sub["system"]), sub["threads"], sub["device"], software,
                                            mini=sub.get("mini", True), frameworks=sub.get("frameworks")),
    }
    atomic.write_json(args.out, record)


if __name__ == "__main__":
    main()
