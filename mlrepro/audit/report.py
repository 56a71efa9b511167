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

# A package of 100,000 junk files must not make a page of 100,000 rows (hundreds of MB): per benchmark
# folder, the first FILES_PER_FINDING files with the same finding get a row each, the rest one row that
# counts them and names the first MORE_NAMES. audit.json keeps every file's verdict.
FILES_PER_FINDING = 5
MORE_NAMES = 5
# A package checker message that lists every file of a folder (seeds, non-compliant files) is cut here
# on the pages; audit.json keeps it whole.
MESSAGE_CHARS = 4000


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


def _finding(f: dict[str, Any]) -> tuple[Any, ...]:
    """A file's row without its name: files whose rows would be equal share a summary row (a run's minutes
    keep compliant runs apart, so a real package's runs are all listed)."""
    return (f["valid"], f["crash"], f["status"], f["minutes"], f["epochs"], f["epochs_unit"], tuple(f["messages"]),
            tuple(f["notes"]), tuple(f["sanity"] or ()))


def bounded(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``files`` with, per benchmark folder and finding, those past the first FILES_PER_FINDING replaced by
    one row ``{"more": count, "names": the first MORE_NAMES of them, **the first file's fields}``."""
    rows: list[dict[str, Any]] = []
    more: dict[tuple[Any, ...], dict[str, Any]] = {}
    seen: dict[tuple[Any, ...], int] = {}
    for f in files:
        key = (f.get("org"), f.get("system"), f.get("benchmark"), *_finding(f))
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= FILES_PER_FINDING:
            rows.append(f)
        elif key in more:
            more[key]["more"] += 1
            if len(more[key]["names"]) < MORE_NAMES:
                more[key]["names"].append(f["name"])
        else:
            more[key] = {**f, "more": 1, "names": [f["name"]]}
    return rows + list(more.values())


def write(audit: dict[str, Any], out: Path) -> None:
    """Render the report into the folder ``out`` (replaced as a whole, atomically)."""
    files = _file_rows(audit)
    rows = {(r["org"], r["system_folder"]): r for r in audit["rows"]}
    common = {"audit": audit, "message_chars": MESSAGE_CHARS, "file_cap": FILES_PER_FINDING, "bounded": bounded,
              "benchmarks": _benchmarks(audit), "titles": TITLES, "page": system_page,
              "mlrepro_version": __version__,
              "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}
    # One environment for all pages: render.render() builds and compiles anew on every call,
    # which for a round's hundred system pages costs more than the rendering.
    env = render.environment()
    with atomic.atomic_dir(out) as tmp:
        (tmp / "systems").mkdir()
        (tmp / "index.html").write_text(env.get_template("audit.html.j2").render(
            files=files, shown=bounded(files), failing=sum(not f["valid"] for f in files), **common), encoding="utf-8",
            errors="backslashreplace")  # names that are not UTF-8: escaped (core/atomic.write_text)
        page = env.get_template("audit_system.html.j2")
        for org in audit["orgs"]:
            for system in org["systems"]:
                (tmp / system_page(org["name"], system["folder"])).write_text(page.render(
                    org=org, system=system, row=rows[org["name"], system["folder"]], **common), encoding="utf-8",
                    errors="backslashreplace")
