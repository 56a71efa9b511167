"""Headless Chromium (Debian's ``chromium``) for the report tests: load a page, run its scripts, dump the DOM."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from tests.conftest import require

# A payload that runs sets the title to this, and every injected element carries this id.
PWNED = "PWNED-by-injected-script"
MARK = "mlrepro-injected"
PAYLOADS = [
    f"<script>document.title='{PWNED}'</script>",
    f"<img id={MARK} src=x onerror=\"document.title='{PWNED}'\">",
    f"\"'><svg id={MARK} onload=\"document.title='{PWNED}'\">",
    f"javascript:document.title='{PWNED}'",
    f"</title><script id={MARK}>document.title='{PWNED}'</script>",
]


def chromium() -> str:
    """The browser's path; a CI run fails without it (.ci/run installs it), a local run skips."""
    path = shutil.which("chromium")
    require(path is not None, "chromium is not installed (.ci/run installs Debian's chromium)")
    assert path is not None
    return path


def browse(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Load ``page`` in headless Chromium with a fresh profile and no background networking (the
    machines reach no outside host); ``args``: what to do with it (--dump-dom, --screenshot, ...)."""
    with tempfile.TemporaryDirectory(prefix="mlrepro-chromium-") as profile:
        return subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             *args, page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, check=False)


def dump_dom(page: Path) -> str:
    """The page's DOM after its scripts ran, as headless Chromium serializes it."""
    proc = browse(page, "--virtual-time-budget=2000", "--dump-dom")
    assert proc.returncode == 0 and "<html" in proc.stdout, f"chromium failed on {page}: {proc.stderr[-2000:]}"
    return proc.stdout


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.injected: list[str] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_title = tag == "title"
        names = dict(attrs)
        if names.get("id") == MARK or any(k.startswith("on") for k in names) or \
                any((v or "").strip().lower().startswith("javascript:") for k, v in attrs if k in ("href", "src")):
            self.injected.append(self.get_starttag_text() or tag)

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data


def assert_no_injection(page: Path) -> str:
    """Load ``page`` in Chromium: no injected script ran (title) and no injected element exists."""
    dom = dump_dom(page)
    parsed = _Elements()
    parsed.feed(dom)
    # the escaped payload may be part of a title's text; a payload that ran makes it the whole title
    assert parsed.title.strip() != PWNED, f"{page}: an injected script ran (title {parsed.title!r})"
    assert not parsed.injected, f"{page}: injected elements in the DOM: {parsed.injected[:3]}"
    assert "\x00" not in page.read_text(encoding="utf-8"), f"{page}: NUL bytes in the HTML"
    return dom
