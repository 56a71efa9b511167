"""Audit mode on the fixtures, compared with the official mlperf_logging tools run here."""

from __future__ import annotations

import concurrent.futures as cf
import csv
import hashlib
import logging
import math
import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

from mlrepro.audit import discover, engine, pipeline
from mlrepro.audit import report as audit_report
from mlrepro.audit.cache import Cache
from mlrepro.audit.check import check_files, check_round

FIXTURES = Path(__file__).parent / "fixtures" / "audit"
ROUND = FIXTURES / "round"
BAD = FIXTURES / "bad"
RULESET = "1.1.0"
HOSTILE = BAD / "Mallory" / "results" / "tpu-hostile" / "bert"


def official_verdict(path: str) -> tuple[bool, list[str], str]:
    """What ``python -m mlperf_logging.compliance_checker`` decides, via the same calls it makes."""
    logging.disable(logging.CRITICAL)
    mlp_compliance.enqueued_configs.clear()  # a fresh process, as the CLI has one per file
    checker = mlp_compliance.make_checker("training", RULESET, False, False)
    crash = ""
    try:
        valid = mlp_compliance.main(path, f"training_{RULESET}/common.yaml", checker)[0]
    except Exception as e:
        valid, crash = False, type(e).__name__
    return bool(valid), engine.messages(checker), crash


def all_files() -> list[str]:
    return discover.result_files(discover.find_orgs(ROUND)) + discover.result_files(discover.find_orgs(BAD))


@pytest.fixture(scope="module")
def official() -> dict[str, tuple[bool, list[str], str]]:
    # spawned workers: nothing of this process (or of the audit's fast paths) leaks into them
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        files = all_files()
        return dict(zip(files, pool.map(official_verdict, files), strict=True))


def tree_hash(root: Path) -> str:
    """Every path, type and content under ``root``: any write into an audited package changes it."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<dir>")
    return digest.hexdigest()


@pytest.fixture(scope="module")
def round_audit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("round")
    before = tree_hash(ROUND)
    checks = check_round(ROUND, out / "checks.json", out / ".cache", "training", RULESET, 2)
    audit = pipeline.summarize(ROUND, checks, "training", RULESET)
    pipeline.write_summary(audit, out)
    audit_report.write(audit, out / "report")
    assert tree_hash(ROUND) == before  # nothing written into the audited package
    return audit


@pytest.fixture(scope="module")
def bad_audit(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("bad")
    checks = check_round(BAD, out / "checks.json", out / ".cache", "training", RULESET, 2)
    audit = pipeline.summarize(BAD, checks, "training", RULESET)
    pipeline.write_summary(audit, out)
    audit_report.write(audit, out / "report")
    return audit, out


def test_parse_equals_the_official_parser() -> None:
    for path in all_files():
        try:
            expected = mlp_parser.parse_file(path, ruleset=RULESET)
        except KeyError:  # the JSON line without "key": the official parser dies, so does ours
            with pytest.raises(KeyError):
                engine.parse(engine.log_lines(Path(path).read_bytes(), RULESET), RULESET)
            continue
        assert engine.parse(engine.log_lines(Path(path).read_bytes(), RULESET), RULESET) == expected, path


def test_verdicts_equal_the_official_checker(official: dict[str, Any], tmp_path: Path) -> None:
    run = check_files(list(official), Cache(tmp_path, "training", RULESET), "training", RULESET, 2)
    for path, (valid, messages, crash) in official.items():
        rec = run.records[path]
        assert (rec.valid, rec.messages) == (valid, messages), path
        assert rec.crash.split(":")[0] == crash, path
    assert sum(v for v, _, _ in official.values()) not in (0, len(official))  # both kinds are covered


def test_cli_exit_status_agrees_on_bad_inputs(official: dict[str, Any]) -> None:
    def cli(path: Path) -> int:
        return subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                               "--ruleset", RULESET, "--log_output", "/dev/null", str(path)],
                              capture_output=True, check=False).returncode

    files = [HOSTILE / f"result_{i}.txt" for i in (0, 1, 5, 6, 7)]
    with cf.ThreadPoolExecutor(2) as pool:
        codes = list(pool.map(cli, files))
    assert [c == 0 for c in codes] == [official[str(f)][0] for f in files] == [True, False, False, False, False]


def _official_tool(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, check=False)


def _summarize(orgs: list[str], pkg: Path, tag: str) -> dict[str, dict[str, str]]:
    """result_summarizer -csv on each organisation of ``pkg``: rows by details_url."""
    with cf.ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda org: _official_tool(["mlperf_logging.result_summarizer", org, "training", RULESET,
                                                         "-csv", str(pkg.parent / f"{org}.{tag}.csv")], pkg), orgs))
    assert all(p.returncode == 0 for p in done), [p.stderr[-2000:] for p in done]
    rows = {}
    for org in orgs:
        with open(pkg.parent / f"{org}.{tag}.csv", newline="") as f:
            reader = csv.DictReader(f)
            assert reader.fieldnames == pipeline.summary.official_columns("training", RULESET)
            rows.update({r["details_url"]: r for r in reader})
    return rows


def test_scores_and_package_verdicts_equal_the_official_tools(round_audit: dict[str, Any], tmp_path: Path) -> None:
    # The official tools write into the package (scaling.json) and the working folder: a copy. The
    # summarizer scores a folder before its RCP check writes scaling.json, so its first run prints
    # raw scores and its second, reading what the first wrote, the published ones.
    pkg = tmp_path / "pkg"
    shutil.copytree(ROUND, pkg)
    orgs = [o["name"] for o in round_audit["orgs"]]
    first = _summarize(orgs, pkg, "first")
    checks = [["mlperf_logging.package_checker", org, "training", RULESET, "--log_output", str(tmp_path / f"{org}.log")]
              for org in orgs]
    with cf.ThreadPoolExecutor(2) as pool:
        assert all(p.returncode == 0 for p in pool.map(lambda a: _official_tool(a, pkg), checks))
    second = _summarize(orgs, pkg, "second")
    ours = {r["details_url"]: r for r in round_audit["rows"]}
    benchmarks = ("bert", "dlrm", "maskrcnn", "minigo", "resnet", "ssd", "rnnt", "unet3d")
    assert first.keys() == second.keys() and first
    scaled = 0
    for url, row in second.items():
        mine = ours[url]
        for column, value in row.items():
            if column in benchmarks:
                assert (mine[column] is None) == (value == ""), (url, column)
                if value:
                    assert math.isclose(mine[column], float(value), rel_tol=0, abs_tol=1e-9), (url, column)
                    raw = float(first[url][column])
                    assert math.isclose(mine[f"{column}:raw_score"], raw, rel_tol=0, abs_tol=1e-9), (url, column)
                    scaled += mine[f"{column}:rcp_norm_factor"] != 1.0 and mine[column] != raw
            else:
                assert str(mine[column]) == value, (url, column)
    assert scaled  # Baidu's resnet converges faster than the RCP mean: the published score is scaled
    for org in orgs:
        log = (tmp_path / f"{org}.log").read_text()
        passed = "PACKAGE CHECKER FOUND NO ERRORS" in log
        assert passed == next(o for o in round_audit["orgs"] if o["name"] == org)["package"]["passed"], org


def test_seed_document_tables(round_audit: dict[str, Any]) -> None:
    rows = round_audit["rows"]
    closed = {e["benchmark"]: e for e in round_audit["seed_tables"]["closed"]}
    baidu = next(r for r in rows if r["system_folder"] == "1_node_8_A100_NGC21.05_MXNet")
    assert closed["resnet"]["minutes"] == baidu["resnet"]
    assert closed["resnet"]["per_accelerator"] == baidu["resnet"] * 8
    open_ = {e["benchmark"]: e for e in round_audit["seed_tables"]["open"]}
    google = [r for r in rows if r["org"] == "Google"]
    assert open_["bert"]["minutes"] == min(r["bert"] for r in google)
    assert open_["bert"]["per_accelerator"] is None  # no single-node system


def test_bad_inputs_become_verdicts(bad_audit: tuple[dict[str, Any], Path]) -> None:
    audit, out = bad_audit
    (org,) = audit["orgs"]
    systems = {s["folder"]: s for s in org["systems"]}
    files = {f["name"]: f for b in systems["tpu-hostile"]["benchmarks"] if b["folder"] == "bert" for f in b["files"]}
    assert not files["result_1.txt"]["valid"] and "Parse error" in files["result_1.txt"]["notes"][0]
    assert not files["result_2.txt"]["valid"] and files["result_2.txt"]["minutes"] is None
    assert any("no time to train" in n for n in files["result_3.txt"]["notes"])
    assert files["result_6.txt"]["crash"].startswith("FileNotFoundError")
    assert files["result_7.txt"]["crash"].startswith("KeyError")
    assert files["result_0.txt"]["valid"] and files["result_8.txt"]["valid"]
    gnmt = next(b for b in systems["tpu-hostile"]["benchmarks"] if b["folder"] == "gnmt")
    assert not gnmt["known"] and gnmt["minutes"] is None
    assert "Missing system description" in systems["no-json"]["desc_problem"]
    assert "JSONDecodeError" in systems["bad-json"]["desc_problem"]
    assert "UnicodeDecodeError" in systems["latin-json"]["desc_problem"]
    package = org["package"]
    assert not package["passed"]
    assert any("few-files/bert: incorrect number of result files: found 3" in e for e in package["errors"])
    assert any("gnmt" in w for w in package["warnings"])
    assert len(package["official_crash"]) >= 3
    assert systems["few-files"]["benchmarks"][0]["minutes"] is not None  # every other system is still scored
    page = (out / "report" / "index.html").read_text()
    system_page = (out / "report" / audit_report.system_page("Mallory", "tpu-hostile")).read_text()
    for html in (page, system_page):
        assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in system_page
    assert "&lt;script&gt;alert(&#34;system&#34;)&lt;/script&gt;" in page
    with open(out / "summary.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(org["systems"])
