"""One Jinja2 environment for every report: autoescaped, strict about undefined names."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from mlrepro import PROJECT_ROOT, __version__
from mlrepro.core import atomic

TEMPLATES = PROJECT_ROOT / "report_templates"

# A string from a log can be megabytes long (one unparseable line): the page quotes its start.
MAX_TEXT = 4_000
# Control characters other than tab and newlines are not allowed in HTML (NUL among them).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def shorten(value: object) -> object:
    """What a report prints of ``value``: strings without control characters and cut to MAX_TEXT,
    with a note of the full length. Markup (the reports' own SVG) is left as it is."""
    if not isinstance(value, str) or isinstance(value, Markup):
        return value
    text = _CONTROL.sub("\ufffd", value)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + f" [... shortened: {len(value)} characters in all]"
    return text


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every string from a log is escaped, whatever the template's file name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=shorten,  # every {{ expression }} of every template, before it is escaped
    )
    env.filters["minutes"] = lambda v, digits=3: "—" if v is None else f"{v:.{digits}f}"
    return env


def render(template: str, out: Path, **context: Any) -> None:
    """Render ``template`` with ``context`` into ``out`` (atomically)."""
    context.setdefault("mlrepro_version", __version__)
    context.setdefault("generated_at", dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"))
    atomic.write_text(out, environment().get_template(template).render(**context))
