"""The public Training v1.1 round from ``../shared/data``, whole or as CI's sample of organisations.

The whole round against the official tools takes minutes per release on CI's two cores (the official tools
check every one of its 1,900 files): those tests carry the ``round`` mark and run with ``pytest -m round``.
The integration tier runs the same comparisons on SAMPLE, organisations chosen for what they hold: Baidu's
failing PaddlePaddle folder, scores the RCP check scales, one-file-per-run benchmarks of every kind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

# ../shared/data beside the repository; MLREPRO_SHARED_DATA names it where the checkout lies elsewhere
DATA = Path(os.environ.get("MLREPRO_SHARED_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
V11 = DATA / "mlperf_training_results_v1.1.tar.xz"
RELEASES = DATA / "mlperf_logging_by_round.tar.xz"
SAMPLE = ("Baidu", "Fujitsu", "Google", "HPE", "Samsung")


def extract(archive: Path, dest: Path) -> Path:
    """``archive`` unpacked into ``dest``; ``dest``."""
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest


def copy_orgs(root: Path, dest: Path, orgs: tuple[str, ...] | None = None) -> Path:
    """``orgs``' folders (all: None) of the unpacked round ``root`` copied into ``dest``: a private copy, for a tool
    that writes into what it reads, or a sample of the round; ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for org in sorted(p.name for p in root.iterdir() if p.is_dir()) if orgs is None else orgs:
        shutil.copytree(root / org, dest / org, symlinks=True)
    return dest


def copy_systems(root: Path, dest: Path, folders: tuple[str, ...]) -> Path:
    """The benchmark folders ``folders`` ("<org>/<system>/<benchmark>") of the unpacked round ``root`` with their
    system JSONs, copied into ``dest``; ``dest``."""
    for folder in folders:
        org, system, benchmark = folder.split("/")
        shutil.copytree(root / org / "results" / system / benchmark, dest / org / "results" / system / benchmark,
                        symlinks=True, dirs_exist_ok=True)
        (dest / org / "systems").mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / org / "systems" / f"{system}.json", dest / org / "systems")
    return dest


# Session fixtures (imported by tests/conftest.py): what several test files read of the v1.1 round, made once per
# pytest session. Each is read only: a test that writes, or runs a tool that writes (the official summarizer and
# package checker write scaling.json into the folder they read), takes a private copy (copy_orgs, copy_systems).
@pytest.fixture(scope="session")
def v11_round(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole v1.1 round, unpacked once."""
    from tests.conftest import require

    require(V11.is_file(), f"{V11} is absent")
    return extract(V11, tmp_path_factory.mktemp("v11_round"))


@pytest.fixture(scope="session")
def v11_checks(v11_round: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The audit's check step on the whole v1.1 round, as the rules run it (``python -m mlrepro.audit check``, the
    installed release, two jobs; about a minute on two cores), once: its output folder (checks.json), read only."""
    out = tmp_path_factory.mktemp("v11_checks")
    subprocess.run([sys.executable, "-m", "mlrepro.audit", "check", "--root", str(v11_round), "--out", str(out),
                    "--ruleset", "1.1.0", "--jobs", "2"], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mlperf_logging_by_round.tar.xz unpacked once: the source tree at each round's tag, a folder per tag."""
    from tests.conftest import require

    require(RELEASES.is_file(), f"{RELEASES} is absent")
    folder = tmp_path_factory.mktemp("releases")
    with tarfile.open(RELEASES) as tar:
        tar.extractall(folder, filter="data")
    return folder


@pytest.fixture(scope="session")
def v11_summary(v11_round: Path, v11_checks: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The audit's summarize step on the whole v1.1 round after the session's check step (``v11_checks``), as the
    rules run it (``python -m mlrepro.audit summarize``), given a published result-ID table: the round's first ten
    systems in the rule's order with their derived IDs (ids.csv, beside the output folder). Its output folder
    (audit.json, summary.csv and .json, report/), read only: tests/test_audit_ids.py checks its IDs,
    tests/test_audit_consistency.py its consistency findings, one summary of the whole round for both."""
    from mlrepro.audit import discover, result_ids

    folder = tmp_path_factory.mktemp("v11_summary")
    out = folder / "out"
    out.mkdir()
    shutil.copy(v11_checks / "checks.json", out)
    first = result_ids.assign(discover.find_orgs(v11_round), v11_round, "1.1.0", None).entries[:10]
    (folder / "ids.csv").write_text("org,system,id\n" + "".join(f"{e.keys.org},{e.keys.system},{e.derived}\n"
                                                                 for e in first))
    subprocess.run([sys.executable, "-m", "mlrepro.audit", "summarize", "--root", str(v11_round), "--out", str(out),
                    "--ruleset", "1.1.0", "--result-ids", str(folder / "ids.csv")], check=True, capture_output=True)
    return out
