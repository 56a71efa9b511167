"""The inference audit: the whole published v1.1 round in ../shared/data, and bad input with a verdict per file."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from mlrepro.inference import audit
from tests.conftest import REPO, refused, require, snakemake

ROUND = REPO.parent / "shared" / "data" / "mlperf_inference_results_v1.1.tar.xz"
if not ROUND.is_file():
    ROUND = Path("/work/shared/data/mlperf_inference_results_v1.1.tar.xz")


@pytest.fixture(scope="module")
def v11(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(ROUND.is_file(), f"{ROUND} is not here")
    root = tmp_path_factory.mktemp("v11")
    subprocess.run(["tar", "-xJf", str(ROUND), "-C", str(root)], check=True)
    return root


def test_whole_v11_round(v11: Path, tmp_path: Path) -> None:
    report = audit.audit(v11)
    counts = audit.counts(report)
    # every summary file of the round read, none crashing the audit
    every = sorted(str(p.relative_to(v11)) for p in v11.rglob("mlperf_log_summary.txt"))
    assert len(every) == 4019 and sorted(f["file"] for f in report["summaries"]) == every
    assert counts["summary_files_unreadable"] == 0
    # one result per results/<system>/<benchmark>/<scenario>/ folder, its verdict as LoadGen printed it
    perf = sorted(v11.glob("*/*/results/*/*/*/performance/run_1/mlperf_log_summary.txt"))
    assert counts["scenario_folders"] == len(perf) == 1814
    printed = {str(p.relative_to(v11)): re.search(r"^Result is : (\w+)", p.read_text(), re.M).group(1) for p in perf}
    assert {r["file"]: r["verdict"] for r in report["results"]} == printed
    # every closed Offline result has its per-accelerator value, or says why not (CPU only)
    closed_offline = [r for r in report["results"] if r["division"] == "closed" and r["scenario"] == "Offline"]
    assert closed_offline and all(
        (r["per_accelerator"] is not None) == bool(r["accelerators"]) for r in closed_offline)
    assert all(r["message"].startswith("CPU only") for r in closed_offline if not r["accelerators"])

    # Spot checks, by hand from the files (summary line / system JSON):
    def value(org: str, system: str, benchmark: str) -> float:
        [r] = [r for r in closed_offline if (r["org"], r["system"], r["benchmark"]) == (org, system, benchmark)]
        return r["per_accelerator"]
    # closed/NVIDIA/.../DGX-A100_A100-SXM-80GBx8_TRT/resnet50/Offline: "Samples per second: 313516";
    # systems/DGX-A100_A100-SXM-80GBx8_TRT.json: accelerators_per_node 8, number_of_nodes 1 -> 313516 / 8
    assert value("NVIDIA", "DGX-A100_A100-SXM-80GBx8_TRT", "resnet50") == pytest.approx(39189.5)
    # closed/Alibaba/.../A10x1_TRT/ssd-mobilenet/Offline: "Samples per second: 20866.1"; the JSON has the
    # counts as strings "1" and "1" -> 20866.1
    assert value("Alibaba", "A10x1_TRT", "ssd-mobilenet") == pytest.approx(20866.1)
    # closed/NVIDIA/.../AGX_Xavier_TRT/3d-unet-99/Offline holds a SingleStream run: Offline is inferred from
    # "QPS w/o loadgen overhead : 2.67" (as the official checker does); 1 accelerator -> 2.67
    assert value("NVIDIA", "AGX_Xavier_TRT", "3d-unet-99") == pytest.approx(2.67)

    audit.write(report, tmp_path)
    table = (tmp_path / "inference_table.csv").read_text().splitlines()
    assert table[0].startswith("org,system,accelerator,accelerators,") and len(table) > 50
    assert "39189.5" in (tmp_path / "inference_table.csv").read_text()
    # the seed layout: benchmark rows, accelerator columns, the best VALID value of any system with it
    accelerators, seed_rows = audit.seed_by_accelerator(report)
    assert accelerators == sorted(accelerators)
    resnet = next(r for r in seed_rows if r["benchmark"] == "resnet50")
    a100 = [c["per_accelerator"] for a, c in resnet["cells"].items() if "A100-SXM-80GB" in a]
    assert a100 and max(a100) >= 39189.5
    assert [r["benchmark"] for r in seed_rows][:2] == ["dlrm-99", "dlrm-99.9"]
    assert (tmp_path / "inference_seed_table.csv").read_text().startswith("benchmark,")


SUMMARY = """================================================
MLPerf Results Summary
================================================
SUT name : X
Scenario : Offline
Mode     : PerformanceOnly
Samples per second: 1000
Result is : VALID
  Min duration satisfied : Yes
  Min queries satisfied : Yes

No errors encountered during test.
"""


def _round(root: Path) -> Path:
    org = root / "closed" / "Org"
    (org / "systems").mkdir(parents=True)
    (org / "systems" / "good.json").write_text(json.dumps({"accelerators_per_node": "4", "number_of_nodes": 1,
                                                            "accelerator_model_name": "A<b>"}))
    (org / "systems" / "nocount.json").write_text(json.dumps({"accelerator_model_name": "B"}))

    def result(system: str, bench: str, scenario: str, text: str | None) -> None:
        d = org / "results" / system / bench / scenario / "performance" / "run_1"
        d.mkdir(parents=True)
        if text is not None:
            (d / "mlperf_log_summary.txt").write_text(text)

    result("good", "resnet50", "Offline", SUMMARY)
    result("good", "bert-99", "Offline", SUMMARY[:200])  # cut before the metric
    result("good", "dlrm-99", "Offline", '{"not": "a summary"}')  # foreign
    result("good", "resnet50", "Server", None)  # no summary at all
    result("nocount", "resnet50", "Offline", SUMMARY)
    return root


def test_bad_input_gets_a_verdict_per_file(tmp_path: Path) -> None:
    root = _round(tmp_path / "round")
    report = audit.audit(root)
    by_file = {r["file"].split("/results/")[1]: r for r in report["results"]}
    ok = by_file["good/resnet50/Offline/performance/run_1/mlperf_log_summary.txt"]
    assert (ok["status"], ok["verdict"], ok["per_accelerator"]) == ("ok", "VALID", 250.0)
    truncated = by_file["good/bert-99/Offline/performance/run_1/mlperf_log_summary.txt"]
    assert truncated["status"] == "error" and "truncated" in truncated["message"]
    foreign = by_file["good/dlrm-99/Offline/performance/run_1/mlperf_log_summary.txt"]
    assert foreign["status"] == "error" and "not a LoadGen summary" in foreign["message"]
    missing = by_file["good/resnet50/Server/performance/run_1/mlperf_log_summary.txt"]
    assert missing["status"] == "error" and "no performance/run_1/mlperf_log_summary.txt" in missing["message"]
    nocount = by_file["nocount/resnet50/Offline/performance/run_1/mlperf_log_summary.txt"]
    assert (nocount["verdict"], nocount["per_accelerator"]) == ("VALID", None)
    assert "no accelerators_per_node" in nocount["message"]
    systems = {s["system"]: s for s in report["systems"]}
    assert systems["nocount"]["status"] == "error" and systems["good"]["accelerators"] == 4


@pytest.mark.integration
def test_snakemake_inference_audit(tmp_path: Path) -> None:
    root = _round(tmp_path / "round")
    snakemake(tmp_path, "--config", f"audit={root}", "usage=inference", f"audit_out={tmp_path / 'out'}")
    html = (tmp_path / "out" / "inference_report.html").read_text()
    assert "A&lt;b&gt;" in html and "250.0" in html  # escaped, and the per-accelerator value
    results = json.loads((tmp_path / "out" / "inference_results.json").read_text())
    assert results["counts"]["errors"] == 3
    # an output folder inside the audited round is refused
    proc = snakemake(tmp_path, "--config", f"audit={root}", "usage=inference", f"audit_out={root / 'x'}",
                     check=False)
    refused(proc, "inside the audited round")


def test_hostile_entries_get_a_verdict_without_hanging(tmp_path: Path) -> None:
    """A FIFO named like a summary (reading it would block), a symlinked system JSON, a huge binary summary."""
    import os

    org = tmp_path / "round" / "closed" / "O"
    fifo = org / "results" / "s" / "resnet50" / "Offline" / "performance" / "run_1"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "mlperf_log_summary.txt")
    (org / "systems").mkdir()
    (org / "systems" / "s.json").symlink_to("/etc/passwd")
    huge = org / "results" / "s" / "bert" / "Offline" / "performance" / "run_1"
    huge.mkdir(parents=True)
    (huge / "mlperf_log_summary.txt").write_bytes(b"\x00\xff" * 2_000_000)
    report = audit.audit(tmp_path / "round")
    messages = {r["benchmark"]: r["message"] for r in report["results"]}
    assert messages == {"resnet50": "not a regular file",
                        "bert": "not a LoadGen summary (no 'MLPerf Results Summary' header)"}
    assert report["systems"][0]["message"] == "not a regular file"
