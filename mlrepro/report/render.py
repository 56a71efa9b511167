"""One Jinja2 environment for every report: autoescaped, strict about undefined names."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import jinja2

from mlrepro import PROJECT_ROOT, __version__, atomic

TEMPLATES = PROJECT_ROOT / "report_templates"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every string from a log is escaped, whatever the template's file name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["minutes"] = lambda v, digits=3: "—" if v is None else f"{v:.{digits}f}"
    return env


def render(template: str, out: Path, **context: Any) -> None:
    """Render ``template`` with ``context`` into ``out`` (atomically)."""
    context.setdefault("mlrepro_version", __version__)
    context.setdefault("generated_at", dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"))
    atomic.write_text(out, environment().get_template(template).render(**context))
