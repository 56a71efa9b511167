"""The audit's HTML report: one index page for the package and one page per system."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from pathlib import Path
from typing import Any

from mlrepro import __version__
from mlrepro.core import atomic
from mlrepro.core.rulesets import TITLES, table_order
from mlrepro.report import render

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file-name-safe form of an organisation or system folder name."""
    return _UNSAFE.sub("_", text) or "_"


def system_page(org: str, folder: str) -> str:
    name = f"{safe_name(org)}__{safe_name(folder)}"
    if name != f"{org}__{folder}":  # names that had to be changed could meet: keep them apart
        name += "-" + hashlib.sha256(f"{org}/{folder}".encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"systems/{name}.html"


def _benchmarks(audit: dict[str, Any]) -> list[str]:
    return list(table_order(audit["ruleset"], audit["usage"]))


def _file_rows(audit: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"org": org["name"], "system": system["folder"], "benchmark": b["folder"],
             "page": system_page(org["name"], system["folder"]), **f}
            for org in audit["orgs"] for system in org["systems"] for b in system["benchmarks"] for f in b["files"]]


def write(audit: dict[str, Any], out: Path) -> None:
    """Render the report into the folder ``out`` (replaced as a whole, atomically)."""
    files = _file_rows(audit)
    rows = {(r["org"], r["system_folder"]): r for r in audit["rows"]}
    common = {"audit": audit, "benchmarks": _benchmarks(audit), "titles": TITLES, "page": system_page,
              "mlrepro_version": __version__,
              "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}
    # One environment for all pages: render.render() builds and compiles anew on every call,
    # which for a round's hundred system pages costs more than the rendering.
    env = render.environment()
    with atomic.atomic_dir(out) as tmp:
        (tmp / "systems").mkdir()
        (tmp / "index.html").write_text(env.get_template("audit.html.j2").render(
            files=files, failing=sum(not f["valid"] for f in files), **common), encoding="utf-8",
            errors="backslashreplace")  # names that are not UTF-8: escaped (core/atomic.write_text)
        page = env.get_template("audit_system.html.j2")
        for org in audit["orgs"]:
            for system in org["systems"]:
                (tmp / system_page(org["name"], system["folder"])).write_text(page.render(
                    org=org, system=system, row=rows[org["name"], system["folder"]], **common), encoding="utf-8",
                    errors="backslashreplace")
