"""`.ci/slurm.sh stop` on a shared machine (issue 36): it acts only on a state folder that is root's and private,
named by a pointer file only root can write, and kills a pid only when that process is the daemon its pid file
claims. Before, the state was `/tmp/mlrepro-slurm` (made with `rm -rf; mkdir -p`) and `stop` killed whatever pid
a file there held. No cluster is started or stopped here: the pointer is the test's own (MLREPRO_SLURM_POINTER).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / ".ci" / "slurm.sh"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason=".ci/slurm.sh runs as root (CI does); the cases "
                                "give folders to another user")


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process of root's that a planted pid file names."""
    proc = subprocess.Popen(["sleep", "120"])
    yield proc
    proc.kill()
    proc.wait()


def stop(pointer: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "MLREPRO_SLURM_POINTER": str(pointer)})


def alive(proc: subprocess.Popen[bytes]) -> bool:
    time.sleep(0.2)
    return proc.poll() is None


def test_a_planted_pid_file_kills_nothing(tmp_path: Path, victim: subprocess.Popen[bytes]) -> None:
    """A private state folder whose slurmctld.pid and slurmd pid files name a process that is no Slurm daemon."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    for name in ("slurmctld.pid", "slurmd-mlnode1.pid", "mariadb.pid", "munged.pid"):
        (state / name).write_text(f"{victim.pid}\n")
    pointer = tmp_path / "pointer"
    pointer.write_text(str(state))
    proc = stop(pointer)
    assert alive(victim), proc.stderr
    assert f"pid {victim.pid} of {state / 'slurmctld.pid'} is " in proc.stderr and "not slurmctld" in proc.stderr
    assert "stopped nothing" in proc.stderr, proc.stderr


@pytest.mark.parametrize("case", ["another user's", "mode 0777", "a symlink"])
def test_a_state_folder_not_root_s_and_private_is_refused(case: str, tmp_path: Path,
                                                         victim: subprocess.Popen[bytes]) -> None:
    real = tmp_path / "planted"
    real.mkdir(mode=0o700)
    (real / "slurmctld.pid").write_text(f"{victim.pid}\n")
    state = real
    if case == "another user's":
        os.chown(real, 65534, 65534)  # nobody
    elif case == "mode 0777":
        real.chmod(0o777)
    else:
        state = tmp_path / "link"
        state.symlink_to(real)
    pointer = tmp_path / "pointer"
    pointer.write_text(str(state))
    proc = stop(pointer)
    assert proc.returncode == 1 and alive(victim)
    assert f"state folder '{state}' (named in {pointer}) is not a folder of root's with mode 0700" in proc.stderr, \
        proc.stderr


def test_a_pointer_that_is_not_root_s_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    pointer = tmp_path / "pointer"
    pointer.write_text(str(state))
    os.chown(pointer, 65534, 65534)
    proc = stop(pointer)
    assert proc.returncode == 1 and f"{pointer} is not a plain file of root's" in proc.stderr, proc.stderr


def test_the_old_predictable_folder_is_never_read(tmp_path: Path) -> None:
    """No pointer: nothing to stop, whatever /tmp holds (the script names no fixed /tmp path)."""
    text = SCRIPT.read_text()
    assert "/tmp/mlrepro-slurm" not in text and "rm -rf \"$D\"" not in text
    proc = stop(tmp_path / "no-pointer")
    assert proc.returncode == 0 and "stopped nothing (not running)" in proc.stderr, proc.stderr
