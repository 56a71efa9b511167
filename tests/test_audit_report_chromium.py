"""The audit report's scores table at 1400 px in headless Chromium: it scrolls inside itself, never the page.

A copy of the report page gets a probe script that measures the laid-out page and writes the figures
into an element; ``--dump-dom`` returns them, ``--screenshot`` keeps a picture for a human. The same
probe on a copy whose table lost its scroll box must see the page overflow, so the check can fail.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlrepro.audit import pipeline
from mlrepro.audit import report as audit_report
from mlrepro.audit.check import check_round
from tests.chromium import browse as chromium_page
from tests.chromium import chromium

ROUND = Path(__file__).parent / "fixtures" / "audit" / "round"
WIDTH = 1400
PROBE = """<script>
window.addEventListener("load", function () {
  var box = document.querySelector(".table-scroll"), first = document.querySelector("table.scores td");
  var out = document.createElement("pre"); out.id = "mlrepro-probe";
  out.textContent = JSON.stringify({
    viewport: window.innerWidth, page: document.documentElement.scrollWidth,
    body: document.body.scrollWidth,
    box_client: box ? box.clientWidth : null, box_scroll: box ? box.scrollWidth : null,
    sticky: first ? getComputedStyle(first).position : null});
  document.body.appendChild(out);
});
</script>"""


def browse(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return chromium_page(page, f"--window-size={WIDTH},900", "--hide-scrollbars", "--virtual-time-budget=3000",
                         *args)


def measure(page: Path) -> dict[str, Any]:
    probed = page.with_name(page.stem + ".probe.html")
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    proc = browse(probed, "--dump-dom")
    found = re.search(r'<pre id="mlrepro-probe">(.*?)</pre>', proc.stdout)
    assert proc.returncode == 0 and found, f"chromium failed on {probed}: {proc.stderr[-2000:]}"
    return dict(json.loads(found.group(1)))


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chromium()
    out = tmp_path_factory.mktemp("audit")
    checks = check_round(ROUND, out / "checks.json", out / ".cache", "training", "1.1.0", 2)
    audit_report.write(pipeline.summarize(ROUND, checks, "training", "1.1.0"), out / "report")
    return out / "report" / "index.html"


def test_scores_table_fits_the_page_at_1400px(index: Path) -> None:
    m = measure(index)
    assert m["viewport"] == WIDTH
    assert m["page"] <= m["viewport"], f"the page scrolls sideways: {m}"
    # the table is wider than its box and scrolls inside it, its first column kept in view
    assert m["box_scroll"] > m["box_client"] > 0, m
    assert m["sticky"] == "sticky"
    shot = index.with_name("scores-1400.png")
    proc = browse(index, f"--screenshot={shot}")
    assert proc.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", proc.stderr[-2000:]
    assert int.from_bytes(shot.read_bytes()[16:20], "big") == WIDTH  # the PNG header's width


def test_the_check_sees_an_overflowing_page(index: Path) -> None:
    broken = index.with_name("broken.html")
    broken.write_text(index.read_text(encoding="utf-8").replace('class="table-scroll"', 'class="x"'),
                      encoding="utf-8")
    m = measure(broken)
    assert m["page"] > m["viewport"], m
