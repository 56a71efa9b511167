"""The RCP check as the round's review ended: which release's table decides a benchmark folder.

A round's tag holds the RCP tables as they stood at the submission deadline. The rules let a
submitter provide an RCP missing for their batch size during the review, and the review prunes RCPs
found wrong; the round's table (``rcp_checker/<usage>_<ruleset>/``) as the review left it first appears
in the next release, and stays as it is in every release after (the v1.1 and v2.0 tables of 2.0.0 or
2.1.0 through 6.0.0-rc6 are byte-identical). The rule this audit applies (docs/audit-checks.md):

* the RCP check of a closed benchmark folder is the round's tag's own RCP checker with the round's
  table of the first release after the tag that holds one (the table as the review ended);
* the verdict names the release whose table decided: the tag where both tables give the same verdict
  and message, else that later release ("RCP for BS 6144: release 2.0.0");
* with no later release at hand (``audit_logging`` names one version), the tag's own table decides.

It runs in the workers of ``official`` beside the judging release's own tools, on their copy of the package.

On the v1.1 round this passes the five results of 1.1.0-rc4's "Missing RCP"/interpolation failures
whose RCPs were submitted during the review (RNN-T 6144, SSD 1536, 3D U-Net 84, ResNet 64800 after
64480 was pruned) and Habana's ResNet 2048, whose too-fast 2048 RCP was pruned; all are published.

``--rcp_bypass`` applies only where the package records it (``package_checker_params``), as the
package checker reads it. The check runs on a scratch copy of the folder's result files: the official
RCP checker may write or delete ``scaling.json`` in the folder it reads.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import io
import json
import logging
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlrepro.audit.discover import BenchmarkDir
from mlrepro.audit.runfile import FileCheck
from mlrepro.core import versions


@dataclass(frozen=True)
class Decision:
    bs: Any  # the folder's global_batch_size (None where the logs disagree or name none)
    release: str  # the release whose table decided
    source: str  # "tag" | "later release" | "installed release"
    passed: bool | None = None  # the verdict with the review's table (None: not computed, the tag's holds)
    message: str = ""

    @property
    def label(self) -> str:
        """As the verdict says it: "RCP for BS 16384: release 2.1.0"."""
        return f"RCP for BS {self.bs}: release {self.release}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


def table(release: Path, usage: str, ruleset: str) -> Path:
    return release / "mlperf_logging" / "rcp_checker" / f"{usage}_{ruleset}"


def batch_size(bdir: BenchmarkDir, records: dict[str, FileCheck]) -> Any:
    """The folder's batch size as the RCP checker reads it (None unless every log names the same one)."""
    sizes = {json.dumps(records[str(f)].rcp_bs) for f in bdir.result_files if str(f) in records}
    return json.loads(sizes.pop()) if len(sizes) == 1 else None


def review_table(later: list[Path], usage: str, ruleset: str, benchmark: str) -> Path | None:
    """The first later release that holds the round's table for ``benchmark``."""
    return next((r for r in later if (table(r, usage, ruleset) / f"rcps_{benchmark}.json").is_file()), None)


def decide(bdir: BenchmarkDir, usage: str, ruleset: str, judge: Path, later: list[Path],
           bypass: bool) -> tuple[str, str, bool | None, str]:
    """(source, the release whose table decided, the verdict with the review's table, its message) of a folder."""
    tag = versions.describe(judge).label
    release = review_table(later, usage, ruleset, bdir.name)
    if release is None:
        return "tag", tag, None, ""
    at_tag = check_with_table(bdir, usage, ruleset, table(judge, usage, ruleset), bypass)
    reviewed = check_with_table(bdir, usage, ruleset, table(release, usage, ruleset), bypass)
    if reviewed == at_tag:
        return "tag", tag, reviewed[0], reviewed[1]
    return "later release", versions.describe(release).label, reviewed[0], reviewed[1]


def check_with_table(bdir: BenchmarkDir, usage: str, ruleset: str, rcps: Path, bypass: bool) -> tuple[bool, str]:
    """The judging release's own RCP check of the folder, with the RCP table in ``rcps`` instead of its own.

    From 3.0 ``check_directory`` takes a table (``rcp_file``); 1.x and 2.x build a checker that reads
    every benchmark's table from its package folder, here a subclass that reads them from ``rcps``."""
    from mlperf_logging.rcp_checker import rcp_checker

    with tempfile.TemporaryDirectory(prefix="mlrepro-rcp-review-") as scratch:
        folder = Path(scratch) / bdir.name
        folder.mkdir()
        for f in bdir.result_files:
            shutil.copyfile(f, folder / f.name)
        with contextlib.redirect_stdout(io.StringIO()), _quiet():
            if hasattr(rcp_checker, "check_directory"):
                with open(rcps / f"rcps_{bdir.name}.json", encoding="utf-8") as table_file:
                    passed, message, *_ = rcp_checker.check_directory(
                        str(folder), usage, ruleset, False, False, rcp_file=table_file, rcp_pass="pruned_rcps",
                        rcp_bypass=bypass, set_scaling=False)
                return bool(passed), str(message)

            checker = copy.deepcopy(_checker(rcps, usage, ruleset))  # its check may sort the records it reads
            params = inspect.signature(checker._check_directory).parameters
            kwargs: dict[str, Any] = {"rcp_bypass": bypass}
            if "rcp_pass" in params:
                kwargs["rcp_pass"] = "pruned_rcps"
            if "set_scaling" in params:
                kwargs["set_scaling"] = False
            passed, message = checker._check_directory(str(folder), **kwargs)[:2]
            return bool(passed), str(message)


@functools.cache
def _checker(rcps: Path, usage: str, ruleset: str) -> Any:
    """A 1.x/2.x RCP checker of the judging release reading every benchmark's table from ``rcps``, its statistics
    computed (once per table: the p-value searches over every record are most of a check's time)."""
    from mlperf_logging.rcp_checker import rcp_checker

    class _Table(rcp_checker.RCP_Checker):  # type: ignore[misc,name-defined]
        def _consume_json_file(self, usage: str, ruleset: str, benchmark: str) -> Any:
            return json.loads((rcps / f"rcps_{benchmark}.json").read_text(encoding="utf-8"))

    with contextlib.redirect_stdout(io.StringIO()), _quiet():
        checker = _Table(usage, ruleset, False, False)
        checker._compute_rcp_stats()
    return checker


@contextlib.contextmanager
def _quiet() -> Any:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        root.setLevel(level)


def is_rcp_error(message: str) -> bool:
    """A package checker error of the RCP check (its wording by release: "RCP Test Failed", "RCP test failed")."""
    return "rcp test failed" in message.lower()
