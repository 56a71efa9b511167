"""The release that judges a ruleset from 5.0.0 on comes by itself (mlrepro/core/releases.py): the table against the
releases' own trees, planning that waits for the install job, the install with real pip (from a folder of wheels:
the fast tier touches no network), its verification before use, two installs at once, and the offline error.

The test wheel holds the tag 6.0.0-rc6's mlperf_logging/ (``../shared/data``), labelled 4.1.51 as the tag's VERSION
file labels it, and is pinned by its own sha256 and tree: a table of one row stands in for the real one. The real
wheels from PyPI are installed in the integration tier (CI reaches PyPI).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from mlperf_logging import benchmark_meta

from mlrepro import config as mlconfig
from mlrepro import systems as mlsystems
from mlrepro.core import release_table, releases, rulesets, versions
from mlrepro.core.job import call
from mlrepro.gate import compliance
from mlrepro.package import assemble
from mlrepro.planning.plan import Plan
from tests.conftest import REPO, make_job, snakemake
from tests.v60 import TAG, extract_release

V60 = {"ruleset": "6.0.0", "benchmarks": {"flux1": {}, "dlrm_dcnv2": {}}}
# pip without this machine's configuration and without any index: no network, whatever the machine has
OFFLINE = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}


@pytest.fixture(scope="module")
def tags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tags")
    for tag in ("5.0.0-rc3", "5.1.0-rc4", TAG):
        extract_release(folder, tag)
    return folder


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def wheel(tags: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[release_table.Pin, Path]:
    """A wheel of the tag's mlperf_logging/ in a folder of wheels, and its pin."""
    tree = tags / TAG
    wheels = tmp_path_factory.mktemp("wheels")
    real = release_table.pinned("6.0.0")
    assert real is not None
    name = real.wheel
    info = "mlperf_logging-4.1.51.dist-info"
    files = {p.relative_to(tree).as_posix(): p.read_bytes() for p in sorted((tree / "mlperf_logging").rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts}
    files[f"{info}/METADATA"] = (b"Metadata-Version: 2.1\nName: mlperf-logging\nVersion: 4.1.51\n"
                                 b"Requires-Dist: pyyaml>=5.4.1\nRequires-Dist: numpy>=1.17.3\n")
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    with zipfile.ZipFile(wheels / name, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    sha256 = hashlib.sha256((wheels / name).read_bytes()).hexdigest()
    pin = release_table.Pin("training", "6.0.0", "4.1.51", name, sha256, versions.describe(tree).digest,
                            real.benchmarks)
    return pin, wheels


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "mlrepro" / "releases"


@pytest.fixture
def test_pin(wheel: tuple[release_table.Pin, Path], cache: Path, monkeypatch: pytest.MonkeyPatch) -> release_table.Pin:
    """The table of one row: the test wheel's."""
    monkeypatch.setattr(release_table, "pins", lambda: (wheel[0],))
    return wheel[0]


def _tree_tables(folder: Path, ruleset: str) -> tuple[tuple[str, int], ...]:
    return tuple((b, rulesets.required_runs(b, "training", folder)) for b in rulesets.allowed_benchmarks(ruleset,
                                                                                                         "training",
                                                                                                         folder))


def test_the_table_pins_each_round_s_release_as_its_tag_and_its_benchmark_tables(tags: Path) -> None:
    for ruleset, tag in (("5.0.0", "5.0.0-rc3"), ("5.1.0", "5.1.0-rc4"), ("6.0.0", TAG)):
        pin = release_table.pinned(ruleset)
        assert pin is not None and versions.ROUND_TAGS[ruleset] == tag
        assert (tags / tag / "VERSION").read_text().strip() == pin.version  # the tag's own release number
        assert pin.benchmarks == _tree_tables(tags / tag, ruleset)
        assert pin.wheel == f"mlperf_logging-{pin.version}-py3-none-any.whl" and len(pin.sha256) == 64
    # 6.1.0 has no tag: 4.1.68, the venv's own (requirements.txt), is the pinned wheel's tree file for file
    pin = release_table.pinned("6.1.0")
    assert pin is not None and pin.version == "4.1.68" and release_table.venv_has(pin)
    assert dict(pin.benchmarks) == {b: benchmark_meta.get_result_file_counts("training")[b]
                                    for b in benchmark_meta.get_allowed_benchmarks("training", "6.1.0")}
    assert release_table.judging_folder("6.1.0") is None and release_table.judging_folder("4.1.0") is None
    assert not release_table.venv_has(release_table.pinned("6.0.0"))


def _plan(raw: dict, base: Path) -> Plan:
    full, benchmarks = mlconfig.load({"outdir": str(base / "out"), **raw}, "test", base_dir=base)
    systems, units = mlsystems.load(full, benchmarks, base, "test")
    return Plan(full, benchmarks, {}, systems, units, REPO)


def test_planning_a_ruleset_whose_release_is_not_installed_waits_for_its_install_job(cache: Path,
                                                                                    tmp_path: Path) -> None:
    pin = release_table.pinned("6.0.0")
    plan = _plan(V60, tmp_path)
    assert plan.logging_release == str(cache / "mlperf-logging-4.1.51")
    assert plan.release_stamps == [str(cache / "mlperf-logging-4.1.51.ok")]
    assert plan.release_stamps == release_table.stamps(release_table.folder(pin))
    assert {b.name: b.required_runs for b in plan.benchmarks.values()} == {"flux1": 10, "dlrm_dcnv2": 10}
    assert not cache.parent.exists()  # planned from the table: nothing installed, nothing made
    with pytest.raises(mlconfig.ConfigError, match=r"ruleset .*has no benchmark 'resnet'"):
        mlconfig.load({**V60, "benchmarks": {"resnet": {}}})
    # the venv's own release (6.1.0), or a folder the user gives, needs no install
    assert _plan({"ruleset": "6.1.0", "benchmarks": {"flux1": {}}}, tmp_path).release_stamps == []


def test_a_new_round_needs_its_row_only(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a ruleset that neither the venv's release nor any folder knows: planned from its row alone
    raw = {"ruleset": "6.2.0", "benchmarks": {"flux1": {}}}
    with pytest.raises(mlconfig.ConfigError, match=r"unknown ruleset '6\.2\.0'.*add its row to mlrepro/core/releases"):
        mlconfig.load(raw)
    row = release_table.Pin("training", "6.2.0", "4.1.99", "mlperf_logging-4.1.99-py3-none-any.whl", "0" * 64, "1" * 64,
                       (("flux1", 10), ("dlrmv4", 10)))
    table = release_table.pins()
    monkeypatch.setattr(release_table, "pins", lambda: (*table, row))
    plan = _plan(raw, tmp_path)
    assert plan.benchmarks["flux1"].required_runs == 10
    assert plan.release_stamps == [str(cache / "mlperf-logging-4.1.99.ok")]


def test_a_folder_the_user_gives_still_judges_without_an_install(tags: Path, cache: Path, tmp_path: Path) -> None:
    plan = _plan({**V60, "logging_release": str(tags)}, tmp_path)
    assert plan.logging_release == str(tags / TAG) and plan.release_stamps == []
    assert releases.checked(tags / TAG) == tags / TAG  # as it is: the user's folder


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.startswith("."))


def test_an_install_is_private_verified_before_use_and_a_tampered_one_is_refused(
        test_pin: release_table.Pin, wheel: tuple[release_table.Pin, Path], cache: Path, tmp_path: Path) -> None:
    where = releases.install(test_pin, wheel[1])
    assert where == release_table.folder(test_pin) and releases.verify(test_pin) == where
    assert stat.S_IMODE(where.stat().st_mode) == 0o700 and stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert versions.describe(where).label == "4.1.51" and _leftovers(cache) == []
    manifest = json.loads((where / release_table.MANIFEST).read_text())
    assert "mlperf_logging/benchmark_meta.py" in manifest["files"] and manifest["tree"] == test_pin.tree

    checker = where / "mlperf_logging" / "compliance_checker" / "training_6.0.0" / "open_llama31_8b.yaml"
    checker.write_text(checker.read_text() + "\n# relaxed\n")
    with pytest.raises(releases.ReleaseError, match=r"fails its verification: 1 file\(s\) differ .*open_llama31_8b"
                                                    r".*python -m mlrepro\.core\.releases install 6\.0\.0"):
        releases.checked(where)
    # the steps it judges refuse it before they use it
    with pytest.raises(releases.ReleaseError, match="fails its verification"):
        compliance.gate(tmp_path / "result_0.txt", "training", "6.0.0", tmp_path / "v.json", None, where, ([], None))
    with pytest.raises(releases.ReleaseError, match="fails its verification"):
        assemble.check(tmp_path, "training", "6.0.0", where)
    assert not (tmp_path / "v.json").exists()

    releases.install(test_pin, wheel[1])  # a folder of this user's that fails is replaced
    assert releases.problem(test_pin, where) is None and "relaxed" not in checker.read_text()
    # a job whose environment names another cache: the folder it is given is the one verified
    elsewhere = tmp_path / "other" / where.name
    shutil.copytree(where, elsewhere, symlinks=True)
    (elsewhere.parent).chmod(0o700)
    assert releases.checked(elsewhere) == elsewhere
    (elsewhere / "mlperf_logging" / "benchmark_meta.py").write_text("_ALL_RESULT_FILE_COUNTS = {}\n")
    with pytest.raises(releases.ReleaseError, match=r"differ .*benchmark_meta\.py"):
        releases.checked(elsewhere)
    (where / "mlperf_logging" / "sitecustomize.py").write_text("import os\n")
    assert "sitecustomize.py" in str(releases.problem(test_pin, where))
    (where / "mlperf_logging" / "sitecustomize.py").unlink()
    os.symlink("/etc/passwd", where / "mlperf_logging" / "link.py")
    assert "not a regular file" in str(releases.problem(test_pin, where))
    (where / "mlperf_logging" / "link.py").unlink()
    (where / release_table.MANIFEST).unlink()
    assert "no readable manifest" in str(releases.problem(test_pin, where))


def test_a_release_folder_open_to_others_is_refused_and_never_replaced(
        test_pin: release_table.Pin, wheel: tuple[release_table.Pin, Path], cache: Path) -> None:
    where = releases.install(test_pin, wheel[1])
    where.chmod(0o770)
    assert "open to other users" in str(releases.problem(test_pin, where))
    with pytest.raises(releases.ReleaseError, match="open to other users; remove it yourself"):
        releases.install(test_pin, wheel[1])
    where.chmod(0o700)
    cache.chmod(0o775)  # the folder above it: another user could swap the release
    assert "open to other users" in str(releases.problem(test_pin, where))
    with pytest.raises(releases.ReleaseError, match=r"the release cache: .*open to other users"):
        releases.install(test_pin, wheel[1])


def test_two_installs_at_once_leave_one_verified_release(test_pin: release_table.Pin,
                                                         wheel: tuple[release_table.Pin, Path], cache: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # two pipelines starting together: both install, one rename wins, the other uses the winner's
    got: list[Path | BaseException] = []
    start = threading.Barrier(2)

    def one() -> None:
        start.wait()
        try:
            got.append(releases.install(test_pin, wheel[1]))
        except BaseException as e:  # reported by the assertion below
            got.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [release_table.folder(test_pin)] * 2 and releases.problem(test_pin, got[0]) is None
    assert _leftovers(cache) == []

    # the loser for certain: another install finishes while this one's pip runs
    releases._remove(release_table.folder(test_pin))
    pip = releases._pip
    winner: list[Path] = []

    def pip_then_lose(pin: release_table.Pin, target: Path, find_links: Path | None) -> None:
        pip(pin, target, find_links)
        monkeypatch.setattr(releases, "_pip", pip)  # the other pipeline installs as it should
        winner.append(releases.install(pin, find_links))

    monkeypatch.setattr(releases, "_pip", pip_then_lose)
    assert releases.install(test_pin, wheel[1]) == winner[0] == release_table.folder(test_pin)
    assert releases.problem(test_pin, winner[0]) is None and _leftovers(cache) == []


def test_offline_the_install_names_the_version_and_the_one_command(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "mlrepro.core.releases", "install", "6.0.0"], capture_output=True,
                          text=True, env={**os.environ, **OFFLINE}, timeout=120, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: could not install mlperf-logging 4.1.51 (which judges ruleset 6.0.0) from PyPI")
    assert "With network: `python -m mlrepro.core.releases install 6.0.0`" in last and "--find-links WHEELS" in last
    assert _leftovers(cache) == [] and not release_table.folder(release_table.pinned("6.0.0")).exists()
    # the pipeline's job: the same line, no traceback (mlrepro/jobs.py puts the log's end on Snakemake's stderr)
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
    job = make_job("judging_release", output={"stamp": str(cache / "mlperf-logging-4.1.51.ok")},
                   params={"ruleset": "6.0.0", "usage": "training"})
    assert call("mlrepro.core.releases:job", job) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert any(line.startswith("error: could not install mlperf-logging 4.1.51") for line in err.splitlines())
    assert not (cache / "mlperf-logging-4.1.51.ok").exists()


@pytest.mark.integration
def test_a_dry_run_shows_the_install_job_and_offline_the_run_stops_there_naming_the_command(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    stamp = str(cache / "mlperf-logging-4.1.51.ok")
    args = ["--configfile", str(REPO / "config/v6.0.yaml"), "--config", "only=[dlrm_dcnv2]"]
    dry = snakemake(work, *args, "-n").stdout
    assert "judging_release" in dry and f"output: {stamp}" in dry
    assert dry.count(stamp) > 10  # every compliance job and the package wait for it
    assert not cache.exists()
    # an audit of a 6.0 round waits for the same release (rules/audit.smk)
    (tmp_path / "round" / "org" / "results").mkdir(parents=True)
    audit = snakemake(work, "-n", "--config", f"audit={tmp_path / 'round'}", "ruleset=6.0.0",
                      f"audit_out={tmp_path / 'audit'}").stdout
    assert "rule judging_release" in audit and f"Input files updated by another job: {stamp}" in audit
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
    proc = snakemake(work, stamp, *args, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "could not install mlperf-logging 4.1.51 (which judges ruleset 6.0.0)" in proc.stderr
    assert "`python -m mlrepro.core.releases install 6.0.0`" in proc.stderr


@pytest.mark.integration
def test_the_real_releases_install_from_pypi_and_verify(cache: Path) -> None:
    for ruleset in ("5.0.0", "6.0.0"):
        pin = release_table.pinned(ruleset)
        where = releases.install(pin)
        assert releases.verify(pin) == where and versions.describe(where).label == pin.version
        tables = subprocess.run(
            [sys.executable, "-P", "-c", "import json, sys; from mlperf_logging import benchmark_meta as m; "
             "a = m.get_allowed_benchmarks('training', sys.argv[1]); c = m.get_result_file_counts('training'); "
             "print(json.dumps([[b, c[b]] for b in a]))", ruleset],
            env={"PYTHONPATH": str(where)}, capture_output=True, text=True, check=True, cwd=where)
        assert tuple(map(tuple, json.loads(tables.stdout))) == pin.benchmarks
