"""`.ci/run`'s `tier`: a failing pytest session fails CI.

`.ci/run` calls `tier ... || failed=1`, and bash ignores `set -e` inside a function called that way: until the tier
returned pytest's status itself, the echo after pytest made every tier "succeed", so failing tests of the fast and
the shared integration tiers left CI green. The function is taken from the script as it is and run against a
stand-in for `.venv/bin/pytest` that exits with a chosen status.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO


def _tier_function() -> str:
    text = (REPO / ".ci" / "run").read_text()
    found = re.search(r"^tier\(\) \{.*?^\}", text, flags=re.S | re.M)
    assert found, ".ci/run defines no tier() function"
    return found.group(0)


@pytest.mark.parametrize(("status", "failed"), [(0, "0"), (1, "1"), (5, "1")])
def test_a_failing_tier_fails_ci(tmp_path: Path, status: int, failed: str) -> None:
    pytest_standin = tmp_path / ".venv" / "bin" / "pytest"
    pytest_standin.parent.mkdir(parents=True)
    pytest_standin.write_text(f"#!/bin/sh\nexit {status}\n")
    pytest_standin.chmod(0o755)
    script = f"set -euo pipefail\n{_tier_function()}\nfailed=0\ntier -m x || failed=1\necho \"failed=$failed\"\n"
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                         check=True).stdout
    assert out.splitlines()[-1] == f"failed={failed}", out
    assert f"exit status {status}" in out


def test_the_shared_tiers_beside_session_names_integration_files_only_once() -> None:
    """Phase 2 of `.ci/run` runs the files of SHARED_BESIDE beside and every other integration file in front (those
    of SHARED_BESIDE, the workloads and LoadGen's ignored there): each listed file exists, holds integration tests,
    is listed once, and is neither the workloads' nor LoadGen's (their own sessions), so that no test runs twice."""
    text = (REPO / ".ci" / "run").read_text()
    found = re.search(r"^SHARED_BESIDE=\((.*?)^\)", text, flags=re.S | re.M)
    assert found, ".ci/run defines no SHARED_BESIDE list"
    files = [w for line in found.group(1).splitlines() for w in line.split("#", 1)[0].split()]
    assert files and len(files) == len(set(files)), files
    alone = {"tests/test_workloads.py", "tests/test_inference.py", "tests/test_inference_vendor_standin.py"}
    assert not alone & set(files)
    for name in files:
        assert (REPO / name).is_file() and "integration" in (REPO / name).read_text(), name
    assert '--ignore "$f"' in text and '"${SHARED_BESIDE[@]}" tests/test_workloads.py tests/test_inference.py' in text


def test_the_services_tests_run_in_two_sessions_each_test_in_one() -> None:
    """Phase 1 runs the tests of CI's services in two sessions beside: the files of SERVICES_BESIDE in one, every
    other file with such tests in the other (SERVICES_BESIDE's ignored there): each listed file exists, holds tests
    of a service, and is listed once, so that no test runs twice and none is left out."""
    text = (REPO / ".ci" / "run").read_text()
    found = re.search(r"^SERVICES_BESIDE=\((.*?)^\)", text, flags=re.S | re.M)
    assert found, ".ci/run defines no SERVICES_BESIDE list"
    files = [w for line in found.group(1).splitlines() for w in line.split("#", 1)[0].split()]
    assert files and len(files) == len(set(files)), files
    for name in files:
        source = (REPO / name).read_text()
        assert (REPO / name).is_file() and ("mark.slurm" in source or "mark.podman" in source), name
    services = '-m "integration and (slurm or podman)"'
    assert f'beside {services} "${{SERVICES_BESIDE[@]}}"' in text
    assert f'beside {services} "${{services_ignored[@]}}"' in text
    assert 'for f in "${SERVICES_BESIDE[@]}"; do services_ignored+=(--ignore "$f"); done' in text
