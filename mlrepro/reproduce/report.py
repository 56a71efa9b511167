"""The reproduction's report: the comparison as JSON and HTML (templates/reproduction.html.j2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlrepro.core import atomic


def write_report(doc: dict[str, Any], json_out: Path, html_out: Path) -> None:
    from mlrepro.report import render

    atomic.write_json(json_out, doc)
    render.render("reproduction.html.j2", html_out, r=doc)


def summary_line(doc: dict[str, Any], html: Path) -> str:
    verdicts = ", ".join(f"{b['benchmark']}: {b['verdict']} ({b['numeric']['line']})" for b in doc["benchmarks"])
    return f"reproduction: {doc['verdict']} ({verdicts}); report {html}"
