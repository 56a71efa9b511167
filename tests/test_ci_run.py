"""`.ci/run`: every failing step or pytest session fails CI, and each test runs in exactly one session.

`.ci/run` calls `tier ... || failed=1`, and bash ignores `set -e` inside a function called that way: until the tier
returned pytest's status itself, the echo after pytest made every tier "succeed", so failing tests of the fast and
the shared integration tiers left CI green. The function is taken from the script as it is and run against a
stand-in for `.venv/bin/pytest` that exits with a chosen status. The whole script is run the same way, against
stand-ins for every program it calls: the setup's steps and the linters now run beside other work, and each of
them, like each session, must still fail CI.
"""

from __future__ import annotations

import re
import shutil
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


_STUB = """#!/usr/bin/env bash
# a stand-in for {name}: records its call; fails where the call contains one of FAIL's patterns (|-separated)
echo "{name} $*" >> "$CALLS"
{extra}
IFS='|' read -ra patterns <<< "${{FAIL:-}}"
for pattern in "${{patterns[@]}}"; do case "{name} $*" in *"$pattern"*) exit 3 ;; esac; done
exit 0
"""


def _ci_tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of `.ci/run` beside stand-ins for every program it calls (services, venv, linters, pytest, chrt), each
    recording its call; FAIL (|-separated) names the calls that fail. Only those and a few system tools are on PATH."""
    root, bin_dir = tmp_path / "repo", tmp_path / "bin"
    (root / ".ci").mkdir(parents=True)
    bin_dir.mkdir()
    shutil.copy(REPO / ".ci" / "run", root / ".ci" / "run")

    def stub(path: Path, name: str, extra: str = "") -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_STUB.format(name=name, extra=extra))
        path.chmod(0o755)

    stub(root / ".ci" / "podman.sh", "podman.sh", '[ "$1" = start ] && echo "export MLREPRO_PODMAN_SOCKET=unix:///x"')
    stub(root / ".ci" / "slurm.sh", "slurm.sh", '[ "$1" = start ] && echo "export SLURM_CONF=/x/slurm.conf"')
    stub(root / ".ci" / "lint-rules.sh", "lint-rules.sh")
    for tool in ("bash", "env", "mktemp", "cat", "cp", "mkdir", "rm", "dirname", "true"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    for tool in ("chromium", "sox", "apt-get"):
        stub(bin_dir / tool, tool)
    stub(bin_dir / "chrt", "chrt", '[ "${FAIL:-}" = chrt ] && exit 1; shift 2; exec "$@"')
    for tool in ("pip", "pytest", "ruff", "lint-imports", "python"):  # what `python3 -m venv .venv` makes here
        stub(tmp_path / "venv" / tool, tool)
    stub(bin_dir / "python3", "python3", f'mkdir -p .venv && cp -r {tmp_path / "venv"} .venv/bin')
    env = {"PATH": str(bin_dir), "CALLS": str(tmp_path / "calls"), "HOME": str(tmp_path)}
    return root, env


def _ci(tmp_path: Path, fail: str = "", missing: str = "", alone: str = "") -> tuple[int, list[str], str]:
    """Runs the copy of `.ci/run` (FAIL=fail; the stand-in named `missing` taken off PATH): its exit status, the calls
    of the stand-ins in the order they started, and its output."""
    root, env = _ci_tree(tmp_path)
    if missing:
        (tmp_path / "bin" / missing).unlink()
    proc = subprocess.run(["bash", str(root / ".ci" / "run")], cwd=root,
                          env={**env, "FAIL": fail, "MLREPRO_CI_LOADGEN_ALONE": alone},
                          capture_output=True, text=True, timeout=60, check=False)
    calls = Path(env["CALLS"]).read_text().splitlines()
    return proc.returncode, calls, proc.stdout + proc.stderr


def test_ci_runs_every_step_and_session_and_stops_the_services(tmp_path: Path) -> None:
    status, calls, out = _ci(tmp_path)
    assert status == 0, out
    for expected in ("podman.sh start", "slurm.sh start", "pip install -r requirements-dev.txt -e .",
                     "ruff check --no-cache .", "lint-imports --no-cache", "lint-rules.sh",
                     "pip install -q --target", "chrt --rr 1 .venv/bin/pytest --durations=15 -m integration "
                     "tests/test_inference.py tests/test_inference_vendor_standin.py",
                     "slurm.sh stop", "podman.sh stop"):
        assert any(expected in call for call in calls), (expected, calls)
    sessions = [call for call in calls if call.startswith("pytest ")]
    assert len(sessions) == 9, sessions  # fast tier 2, services 2, workloads, phase 2 3, LoadGen
    assert "setup: pip install:" in out and "setup: slurm start:" in out and ".ci/run:" in out


@pytest.mark.parametrize("fail", [
    "python3", "pip install -r", "podman.sh start", "slurm.sh start", "apt-get", "ruff", "lint-imports",
    "lint-rules.sh", "pip install -q", "python -c", "pytest --durations=15 --ignore",
    "pytest --durations=15 tests/test_audit",
    "test_workloads", "test_inference.py", "test_snakemake_api", "tests/test_audit_consistency.py",
    "not (slurm or podman) --ignore", "tests/test_slurm.py", "(slurm or podman) --ignore"])
def test_each_failing_step_or_session_fails_ci_and_the_services_are_stopped(tmp_path: Path, fail: str) -> None:
    status, calls, out = _ci(tmp_path, fail, missing="chromium" if fail == "apt-get" else "")  # apt: where missing
    assert status != 0, (fail, out[-3000:], calls)
    assert any(fail in call for call in calls), calls
    assert "slurm.sh stop" in calls and "podman.sh stop" in calls


@pytest.mark.parametrize("alone", ["chrt refused", "MLREPRO_CI_LOADGEN_ALONE=1"])
def test_without_real_time_scheduling_the_loadgen_tests_run_alone_after_phase_2(tmp_path: Path, alone: str) -> None:
    status, calls, out = _ci(tmp_path, fail="chrt" if alone == "chrt refused" else "",
                             alone="1" if alone.startswith("MLREPRO") else "")
    assert status == 0, out
    sessions = [call for call in calls if call.startswith("pytest ")]
    loadgen = "pytest --durations=15 -m integration tests/test_inference.py tests/test_inference_vendor_standin.py"
    assert sessions.count(loadgen) == 1 and not any(call.startswith("chrt --rr 1 .venv") for call in calls), calls
    front = [i for i, call in enumerate(sessions) if "-m integration and not (slurm or podman) --ignore" in call]
    assert front and sessions.index(loadgen) > front[0]
