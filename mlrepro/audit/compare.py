"""Where a second mlperf-logging release judges the same round differently ("rules changed since").

Reads two finished audits of one package (``audit.json``: the round's own release and another)
and lists every result (organisation, system folder, benchmark) whose verdict, compliant-file count
or score differs, with both sides; writes ``rules_changed.json``, ``rules_changed.csv`` and the
report page ``rules_changed.html``.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.report import render

PAGE = "rules_changed.html"
FIELDS = ("org", "system_folder", "benchmark", "what", "verdict", "other_verdict", "compliance", "other_compliance",
          "score", "other_score", "message", "other_message")


def _state(row: dict[str, Any], benchmark: str) -> str:
    """pass (ranked), fail (a check fails) or no score."""
    if benchmark in row.get("ranked", ()):
        return "pass"
    return "fail" if str(row.get(f"{benchmark}:verdict") or "").startswith("fail") else "no score"


def _cells(audit: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    cells = {}
    for row in audit["rows"]:
        for org in audit["orgs"]:
            if org["name"] != row["org"]:
                continue
            for system in org["systems"]:
                if system["folder"] != row["system_folder"]:
                    continue
                for b in system["benchmarks"]:
                    name = b["benchmark"]
                    cells[row["org"], row["system_folder"], name] = {
                        "verdict": _state(row, name), "compliance": row.get(f"{name}:compliance"),
                        "score": row.get(name), "message": row.get(f"{name}:verdict") or b.get("reason") or ""}
    return cells


def _same_score(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def differences(audit: dict[str, Any], other: dict[str, Any]) -> list[dict[str, Any]]:
    """Every result the two audits judge or score differently, in the first audit's row order."""
    ours, theirs = _cells(audit), _cells(other)
    out = []
    for key in [*ours, *(k for k in theirs if k not in ours)]:
        a, b = ours.get(key, {}), theirs.get(key, {})
        what = [w for w in ("verdict", "compliance") if a.get(w) != b.get(w)]
        if not _same_score(a.get("score"), b.get("score")):
            what.append("score")
        if what:
            out.append({"org": key[0], "system_folder": key[1], "benchmark": key[2], "what": ", ".join(what),
                        **{f: a.get(f) for f in ("verdict", "compliance", "score", "message")},
                        **{f"other_{f}": b.get(f) for f in ("verdict", "compliance", "score", "message")}})
    return out


def write(audit_path: Path, other_path: Path, out: Path, report: Path) -> list[dict[str, Any]]:
    """Compare two audits; ``out``: the folder of rules_changed.json/.csv, ``report``: the report folder."""
    audit = json.loads(audit_path.read_text(encoding="utf-8"))
    other = json.loads(other_path.read_text(encoding="utf-8"))
    diffs = differences(audit, other)
    doc = {"judged_by": audit["mlperf_logging"], "other": other["mlperf_logging"], "usage": audit["usage"],
           "ruleset": audit["ruleset"],
           "results": len(_cells(audit)), "differences": diffs}
    atomic.write_json(out / "rules_changed.json", doc)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(diffs)
    atomic.write_text(out / "rules_changed.csv", buf.getvalue())
    render.render("audit_compare.html.j2", report / PAGE, doc=doc)
    return diffs
