"""The audit's line cutter equals ``re.sub(".*" + TOKEN, TOKEN, line)`` wherever it stands in for it."""

from __future__ import annotations

import re
from pathlib import Path

from mlrepro.audit.fastpath import _LineCuttingRe

TOKEN = ":::MLLOG "
FIXTURES = Path(__file__).parent / "fixtures" / "audit"


def test_it_cuts_every_fixture_line_and_edge_case_as_re_does() -> None:
    # text mode: a newline only at a line's end; long lines left out (re's own backtracking is slow on them)
    lines = [line for path in sorted(FIXTURES.rglob("*.txt"))
             for line in path.open(encoding="latin-1") if len(line) < 2_000]
    lines += ["", "\n", TOKEN, "x" + TOKEN, f"a {TOKEN}b {TOKEN}c\n", f"a\r{TOKEN}b\n", f"a\n{TOKEN}b\n",
              f"{TOKEN}" * 3, "no token at all\n", "x" * 3_000 + TOKEN + "{}"]
    cutter = _LineCuttingRe()
    assert len(lines) > 1000
    for line in lines:
        for pattern, repl in ((".*" + TOKEN, TOKEN), (".*" + TOKEN, ""), (".*" + TOKEN, r"\g<0>"), ("^a", "b"),
                              (".*(x)", "y")):
            assert cutter.sub(pattern, repl, line) == re.sub(pattern, repl, line), (pattern, repl, line[:80])
    assert cutter.search is re.search  # everything else is re's own
