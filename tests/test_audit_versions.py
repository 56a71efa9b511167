"""A round judged by its own mlperf-logging, isolated in its own folder, against that release's official tools.

The releases come from ``../shared/data/mlperf_logging_by_round.tar.xz`` (or ``$MLREPRO_SHARED_DATA``): the
source tree at each round's tag, a folder per tag; the round from ``mlperf_training_results_v1.1.tar.xz``. Skipped where
either is absent. The official side runs in an interpreter whose PYTHONPATH is the tag's folder only
(no project code): per organisation, the release's package checker CLI on a fresh copy, with a spy on its
``mlp_compliance.main`` recording every file's verdict, and a handler recording what it logs per
benchmark folder; then its ``result_summarizer`` on the same copy, as the review runs it: twice where
the release writes ``scaling.json`` (the second run is the published table), once for 1.1.0-rc4,
which writes none (checked). The official side runs one organisation per process, two at a time. Each file is
checked once: the package checker's ``mlp_compliance.main`` answer is the summarizer's too (both call it with the
same file and rules file, on fresh checkers of the same release that differ only in ``quiet``, which changes no
verdict; the files do not change between the calls, only ``scaling.json`` is written), as tests/test_audit_round.py
answers the summarizer's second run with its first.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from mlrepro.core import versions
from tests import rounds

FIXTURES = Path(__file__).parent / "fixtures" / "audit" / "round"
RULESET = "1.1.0"
# CI's sample of the round (tests/rounds.py) as 1.1.0-rc4 judges it: (files, failing, folders, scores, scaled)
SAMPLE_FIGURES = (175, 4, 15, 15, 0)

# Runs with PYTHONPATH = the tag's folder only: the release's own tools, nothing of the project. As the
# review runs them: the package checker's CLI on a fresh copy, then the summarizer RUNS times on it.
OFFICIAL = r'''
import contextlib, glob, io, json, logging, os, shutil, sys, tempfile
from mlperf_logging.compliance_checker import mlp_compliance
from mlperf_logging.package_checker import package_checker
from mlperf_logging.result_summarizer import result_summarizer
org, usage, ruleset, runs = sys.argv[1:5]
assert mlp_compliance.__file__.startswith(os.environ["TAG_DIR"] + os.sep), mlp_compliance.__file__
files, errors, section, answers = {}, [], ["", ""], {}
main = mlp_compliance.main
def spy(filename, config_file, checker):
    # the package checker's call first; the summarizer's of the same unchanged file and rules gets its answer
    if (filename, config_file) not in answers:
        answers[filename, config_file] = main(filename, config_file, checker)
        files[os.path.relpath(filename, copy)] = bool(answers[filename, config_file][0])
    return answers[filename, config_file]
class Sections(logging.Handler):
    def emit(self, r):
        if r.msg == " Running compliance checks in dir %s":
            section[:] = os.path.relpath(r.args[0], os.path.join(copy, "results")).split(os.sep)
        elif r.levelno >= logging.ERROR:
            errors.append([*section, r.getMessage()])
scratch = tempfile.mkdtemp()
copy = shutil.copytree(org, os.path.join(scratch, os.path.basename(org)))
mlp_compliance.main = spy
root = logging.getLogger(); root.handlers = [Sections()]; root.setLevel(logging.INFO)
crash = ""
sys.argv = ["package_checker", copy, usage, ruleset, "--log_output", os.path.join(scratch, "log")]
try:
    with contextlib.redirect_stdout(io.StringIO()):
        package_checker.main()
except Exception as e:
    crash = type(e).__name__
root.handlers = []
with contextlib.redirect_stdout(io.StringIO()):
    for _ in range(int(runs)):
        frame = result_summarizer.summarize_results(copy, usage, ruleset)[0]
written = glob.glob(os.path.join(copy, "results", "*", "*", "scaling.json"))
json.dump({"files": files, "errors": errors, "crash": crash, "written": written,
           "published": json.loads(frame.to_json(orient="records"))}, sys.stdout)
shutil.rmtree(scratch)
'''


def _audit(root: Path, out: Path, releases: Path, *extra: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for step in ("check", "summarize"):
        subprocess.run([sys.executable, "-m", "mlrepro.audit", step, "--root", str(root), "--out", str(out),
                        "--ruleset", RULESET, "--jobs", "2", "--logging", str(releases), *extra],
                       env=env, check=True, capture_output=True, text=True)


def test_the_round_tag_is_chosen_from_the_ruleset(releases: Path, tmp_path: Path) -> None:
    assert versions.resolve(releases, RULESET) == (releases / "1.1.0-rc4").resolve()
    assert versions.resolve(releases / "2.0.0", RULESET) == (releases / "2.0.0").resolve()  # one version's folder
    (tmp_path / "1.0.0").mkdir()
    with pytest.raises(versions.VersionError, match=r"pip install --target .*/1\.1\.0-rc4 .*logging@1\.1\.0-rc4"):
        versions.resolve(tmp_path, RULESET)
    with pytest.raises(versions.VersionError, match="not a folder"):
        versions.resolve(tmp_path / "missing", RULESET)


def test_a_version_judges_in_its_own_interpreter(releases: Path, tmp_path: Path) -> None:
    # the child reports where its mlperf_logging comes from; the project's interpreter never imports it
    script = "import mlperf_logging, mlrepro.core.versions as v; v.assert_isolated(); print(mlperf_logging.__file__)"
    folder = versions.resolve(releases, RULESET)
    probe = tmp_path / "probe.py"
    probe.write_text(script)
    assert versions.run_isolated(folder, [str(probe)]) == 0
    out = subprocess.run([sys.executable, "-c", f"import mlrepro.core.versions as v, pathlib; "
                          f"raise SystemExit(v.run_isolated(pathlib.Path({str(folder)!r}), ['-c', {script!r}]))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().startswith(str(folder / "mlperf_logging"))
    assert not any(m.startswith("mlperf_logging") and str(folder) in (getattr(mod, "__file__", "") or "")
                   for m, mod in sys.modules.items())
    # the fixture round judged by 1.1.0-rc4 (and by the installed release too): audit.json and the CSV
    # say which judged, the report too
    _audit(FIXTURES, tmp_path / "out", releases, "--compare-logging", "installed")
    audit = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert audit["mlperf_logging"] == "1.1.0-rc4" and audit["judge"]["folder"] == "1.1.0-rc4"
    with open(tmp_path / "out" / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and {r["judged_by"] for r in rows} == {"1.1.0-rc4"}
    assert "availability" in rows[0] and "number_of_nodes" not in rows[0]  # the 1.1.0 summarizer's columns
    index = (tmp_path / "out" / "report" / "index.html").read_text()
    assert "Judged by mlperf-logging <strong>1.1.0-rc4</strong>" in index
    # its cache is keyed by the release's sources, apart from the installed release's
    assert any("mlperf_logging-tree-" in p.name for p in (tmp_path / "out" / ".cache").rglob("*"))
    # rules changed since: 4.1.68 fails four of Paddle's five resnet logs, which 1.1.0-rc4 accepts (4 of 5),
    # and scales the MXNet score by its RCP factor, which 1.1.0-rc4 did not have
    from importlib.metadata import version

    changed = json.loads((tmp_path / "out" / "rules_changed.json").read_text())
    assert (changed["judged_by"], changed["other"], changed["results"]) == ("1.1.0-rc4", version("mlperf-logging"), 4)
    diffs = {d["system_folder"]: d for d in changed["differences"]}
    paddle = diffs["1_node_8_A100_PaddlePaddle"]
    assert (paddle["verdict"], paddle["compliance"], paddle["other_verdict"], paddle["other_compliance"]) == (
        "pass", "4/5", "no score", "0/5")
    mxnet = diffs["1_node_8_A100_NGC21.05_MXNet"]
    assert mxnet["what"] == "score" and mxnet["other_score"] > mxnet["score"]
    assert set(diffs) == {"1_node_8_A100_PaddlePaddle", "1_node_8_A100_NGC21.05_MXNet"}
    assert 'href="rules_changed.html"' in index
    assert "1_node_8_A100_PaddlePaddle" in (tmp_path / "out" / "report" / "rules_changed.html").read_text()


def _official(org: Path, tag: Path, runs: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(tag), "TAG_DIR": str(tag)}
    out = subprocess.run([sys.executable, "-c", OFFICIAL, str(org), "training", RULESET, str(runs)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _equal_to_the_official_tools(root: Path, out: Path, tag: Path, runs: int) -> tuple[int, int, int, int, int]:
    """Every file verdict, package-checker error and published score of the audit in ``out`` against
    ``tag``'s own tools (``runs`` summarizer runs); (files, failing files, folders, scores, scaled scores)."""
    audit = json.loads((out / "audit.json").read_text())
    checks = json.loads((out / "checks.json").read_text())["files"]
    with ThreadPoolExecutor(2) as pool:  # each call runs a process of its own
        officials = list(pool.map(lambda org: _official(root / org["name"], tag, runs), audit["orgs"]))
    files = failing = folders = scores = scaled = 0
    for org, official in zip(audit["orgs"], officials, strict=True):
        assert not official["crash"], (org["name"], official["crash"])
        # every result file: the verdict of the release's compliance checker
        for rel, valid in official["files"].items():
            assert checks[str(root / org["name"] / rel)]["valid"] == valid, (org["name"], rel)
            files += 1
            failing += not valid
        # every benchmark folder (and the organisation as a whole): the package checker's errors
        theirs: dict[tuple[str, str], list[str]] = {}
        for system, benchmark, message in official["errors"]:
            theirs.setdefault((system, benchmark), []).append(message.strip())  # the audit strips them
        ours: dict[tuple[str, str], list[str]] = {}
        for e in org["package"]["scoped"]:
            prefix = f"{e['system']}/{e['benchmark']}: " if e["system"] else ""
            ours.setdefault((e["system"], e["benchmark"]), []).append(e["message"].removeprefix(prefix))
        assert ours == theirs, org["name"]
        # every score the summarizer's last run publishes (systems it names once)
        names = [r["system"] for r in official["published"]]
        published = {r["system"]: r for r in official["published"] if names.count(r["system"]) == 1}
        for system in org["systems"]:
            row = published.get((system["specs"] or {}).get("system"), {})
            for b in system["benchmarks"]:
                folders += 1
                if row.get(b["benchmark"]) is not None:
                    assert b["minutes"] is not None and abs(row[b["benchmark"]] - b["minutes"]) <= 1e-9
                    scores += 1
                    scaled += b["scaling_factor"] != 1.0
        assert not official["written"] or runs == 2, official["written"]
    return files, failing, folders, scores, scaled


def test_a_later_release_scales_as_its_package_checker_and_summarizer_do(releases: Path, tmp_path: Path) -> None:
    # 4.1.0-rc4's package checker writes scaling.json, which its summarizer (run twice after it) applies
    tag = releases / "4.1.0-rc4"
    _audit(FIXTURES, tmp_path / "out", tag)
    files, failing, folders, scores, scaled = _equal_to_the_official_tools(FIXTURES, tmp_path / "out", tag, 2)
    # 6 failing files: all 5 of Paddle's resnet (its folder fails, so 3 scores of 4) and 1 of MXNet's (tolerated)
    assert (files, failing, folders, scores, scaled) == (30, 6, 4, 3, 1)


@pytest.mark.integration
def test_a_sample_of_the_v1_1_round_judged_by_its_tag_equals_that_tags_official_tools(releases: Path, v11_round: Path,
                                                                                     tmp_path: Path) -> None:
    assert _judged_by_its_tag(releases, v11_round, tmp_path, rounds.SAMPLE) == SAMPLE_FIGURES


@pytest.mark.round
def test_the_v1_1_round_judged_by_its_tag_equals_that_tags_official_tools(releases: Path, v11_round: Path,
                                                                          tmp_path: Path) -> None:
    files, failing, folders, scores, scaled = _judged_by_its_tag(releases, v11_round, tmp_path)
    assert files > 1500 and 0 < failing < files and folders > 100 and scores > 50 and scaled == 0


def _judged_by_its_tag(releases: Path, v11_round: Path, tmp_path: Path,
                       orgs: tuple[str, ...] | None = None) -> tuple[int, int, int, int, int]:
    """The audit of ``orgs`` of the unpacked v1.1 round ``v11_round`` (all: None) by 1.1.0-rc4 against that tag's
    own tools; (files, failing files, folders, scores, scaled scores)."""
    root = rounds.copy_orgs(v11_round, tmp_path / "round", orgs)
    _audit(root, tmp_path / "out", releases)
    # one summarizer run: 1.1.0-rc4 writes no scaling.json (checked), so its first run is also its second
    figures = _equal_to_the_official_tools(root, tmp_path / "out", versions.resolve(releases, RULESET), 1)
    print(f"\n{figures[0]} files ({figures[1]} fail 1.1.0-rc4), {figures[2]} folders, {figures[3]} scores")
    shutil.rmtree(root)
    return figures


@pytest.mark.integration
def test_snakemake_judges_by_the_configured_release_and_hostile_packages_stop_no_one(releases: Path,
                                                                                     tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    shutil.copytree(FIXTURES, package)
    shutil.copytree(FIXTURES.parent / "bad" / "Mallory", package / "Mallory")
    repo = Path(__file__).resolve().parents[1]
    run = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-s", str(repo / "Snakefile"), "-d",
                          str(tmp_path), "--cores", "2", "--config", f"audit={package}", "ruleset=1.1.0",
                          "audit_out=out", f"audit_logging={releases}", "audit_logging_compare=installed"],
                         cwd=tmp_path, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-4000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {r["org"] for r in summary} == {"Baidu", "Google", "Mallory"}
    assert {r["judged_by"] for r in summary} == {"1.1.0-rc4"}
    # 1.1.0-rc4's tools die on Mallory's latin-1 system JSON: every Mallory result says so, nothing stops
    verdicts = [r["bert:verdict"] for r in summary if r["org"] == "Mallory" and r.get("bert:verdict")]
    assert len(verdicts) >= 4 and all("crashes: UnicodeDecodeError" in v for v in verdicts), verdicts
    assert json.loads((tmp_path / "out" / "rules_changed.json").read_text())["other"] != "1.1.0-rc4"
    assert not list(package.rglob("scaling.json"))  # the official tools wrote only into their copies


def test_energy_under_a_release_of_its_own_is_its_summarizers(releases: Path, tmp_path: Path) -> None:
    # 4.1.0-rc4's summarizer returns energies by benchmark, 6.0.0-rc6's as "<benchmark>:Energy": both
    # read as the installed release's energy of the same power logs (tests/test_audit_power.py's package)
    from tests.test_audit_power import MXNET, _package

    package = _package(tmp_path)
    energies = {}
    for tag in ("4.1.0-rc4", "6.0.0-rc6", None):
        out = tmp_path / f"out-{tag}"
        if tag is None:
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
            for step in ("check", "summarize"):
                subprocess.run([sys.executable, "-m", "mlrepro.audit", step, "--root", str(package), "--out", str(out),
                                "--ruleset", RULESET, "--jobs", "2"], env=env, check=True, capture_output=True)
        else:
            _audit(package, out, releases / tag)
        audit = json.loads((out / "audit.json").read_text())
        system = next(s for s in audit["orgs"][0]["systems"] if s["folder"] == MXNET)
        energies[tag] = system["benchmarks"][0]["energy_j"]
    assert energies["4.1.0-rc4"] is not None and energies["4.1.0-rc4"] > 0
    assert energies["4.1.0-rc4"] == pytest.approx(energies["6.0.0-rc6"], rel=1e-12)
    assert energies["4.1.0-rc4"] == pytest.approx(energies[None], rel=1e-12)
