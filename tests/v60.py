"""The mlperf-logging release that judges the v6.0 suite (6.0.0-rc6), from ``../shared/data`` as a test oracle."""

from __future__ import annotations

import tarfile
from pathlib import Path

from tests import rounds
from tests.conftest import require

RELEASES = rounds.DATA / "mlperf_logging_by_round.tar.xz"
TAG = "6.0.0-rc6"
# The minis CI runs through the whole pipeline (tests/test_v60_suite.py: 10 runs each, every log through the
# release's checker): their convergence is checked there, and trained nowhere else (tests/test_v6_decoders.py)
SUITE = ("gpt_oss_20b", "dlrm_dcnv2")


def extract_release(dest: Path, tag: str = TAG) -> Path:
    """A folder of releases named by tag holding ``tag`` alone (as ``logging_release`` takes it); ``dest``."""
    require(RELEASES.is_file(), f"{RELEASES} is absent")
    with tarfile.open(RELEASES) as tar:
        tar.extractall(dest, members=[m for m in tar.getmembers() if Path(m.name).parts[:1] == (tag,)],
                       filter="data")
    return dest


# In an interpreter that sees the release alone: its compliance checker CLI on each file, its package checker CLI
# on the package (argv: the package, then the files); JSON on stdout.
OFFICIAL = r'''
import json, subprocess, sys
package, files = sys.argv[1], sys.argv[2:]
verdicts = {}
for f in files:
    p = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                        "--ruleset", "RULESET", "--log_output", "/dev/null", f], capture_output=True, text=True)
    verdicts[f] = p.returncode == 0 and "SUCCESS" in (p.stdout + p.stderr)
p = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", package, "training", "RULESET",
                    "--log_output", "/dev/null"], capture_output=True, text=True)
print(json.dumps({"files": verdicts, "package": p.stdout + p.stderr}))
'''


def official_checks(ruleset: str) -> str:
    """The script that runs a release's official compliance and package checker CLIs for ``ruleset``."""
    return OFFICIAL.replace("RULESET", ruleset)
