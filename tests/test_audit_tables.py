"""The audit's tables read like the published ones: closed then open, each availability category
ranked on its own, and the convergence column in the unit the benchmark logs (issue 25, item 3)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mlrepro.audit import discover, pipeline, scoring, summary
from mlrepro.audit import report as audit_report
from mlrepro.audit.check import check_round
from mlrepro.audit.runfile import convergence_unit

FIXTURES = Path(__file__).parent / "fixtures" / "audit" / "round"
RULESET = "1.1.0"


def _row(folder: str, division: str, status: str, minutes: float, ranked: bool = True) -> dict[str, Any]:
    return {"division": division, "org": "O", "system": folder, "system_folder": folder, "resnet": minutes,
            "accelerators_count": 8, "number_of_nodes": 1, "ranked": ["resnet"] if ranked else [],
            "resnet:verdict": "scored" if ranked else "fail: seed checker failed",
            "availability_category": summary.category(status)}


def test_each_availability_category_is_ranked_on_its_own_closed_before_open() -> None:
    rows = [_row("research-fastest", "closed", "research", 1.0), _row("preview", "closed", "preview", 2.0),
            _row("cloud", "closed", "cloud", 4.0), _row("onprem", "closed", "onprem", 3.0),
            _row("onprem-failing", "closed", "available", 2.5, ranked=False),
            _row("open-one", "open", "available", 0.5), _row("odd", "closed", "someday", 0.1)]
    tables = summary.category_tables(rows, "training", RULESET)
    assert list(tables) == ["closed", "open"]
    closed = {group: entries[0] for group, entries in tables["closed"].items()}
    assert list(closed) == ["Available", "Preview", "Research, Development, or Internal", "Unknown availability"]
    # cloud and on-premise share the published "Available" table; research and preview never top it
    assert (closed["Available"]["system_folder"], closed["Available"]["minutes"]) == ("onprem", 3.0)
    assert closed["Available"]["failing_system_folder"] == "onprem-failing"  # faster, failing: named, not ranked
    assert closed["Preview"]["system_folder"] == "preview"
    assert closed["Research, Development, or Internal"]["system_folder"] == "research-fastest"
    assert closed["Unknown availability"]["system_folder"] == "odd"
    assert [e["system_folder"] for e in tables["open"]["Available"]] == ["open-one"]
    # the seed documents' view over all categories stays as it was
    assert summary.seed_tables(rows, "training", RULESET)["closed"][0]["system_folder"] == "odd"


def test_every_row_has_the_system_columns_the_tables_show() -> None:
    org = discover.find_orgs(FIXTURES / "Baidu")[0]
    desc = scoring.load_system_desc(org, org.systems[0])
    assert desc.specs is not None and tuple(desc.specs) == scoring.SPEC_COLUMNS
    row = summary.row({"name": "Baidu", "package": {}}, {"specs": None, "desc": None, "folder": "x",
                                                        "desc_problem": "unreadable", "benchmarks": []},
                      "training", RULESET, None)
    assert all(row[k] is None for k in scoring.SPEC_COLUMNS)  # a system JSON that cannot be read


def test_convergence_units() -> None:
    assert convergence_unit("bert", RULESET) == "samples"
    assert convergence_unit("resnet", RULESET) == "epochs"
    assert convergence_unit("llama2_70b_lora", "4.1.0") == "samples"
    assert convergence_unit("stable_diffusion", "3.1.0") == "steps"


def test_the_report_separates_categories_and_labels_samples(tmp_path: Path) -> None:
    checks = check_round(FIXTURES, tmp_path / "checks.json", tmp_path / ".cache", "training", RULESET, 2)
    audit = pipeline.summarize(FIXTURES, checks, "training", RULESET)
    audit_report.write(audit, tmp_path / "report")
    # Google's two open systems: one research, one available; Baidu's closed ones on-premise
    assert {d: list(g) for d, g in audit["category_tables"].items()} == {
        "closed": ["Available"], "open": ["Available", "Research, Development, or Internal"]}
    bert = [b for org in audit["orgs"] for s in org["systems"] for b in s["benchmarks"] if b["benchmark"] == "bert"]
    assert bert and all(b["epochs_unit"] == "samples" for b in bert)
    index = (tmp_path / "report" / "index.html").read_text()
    heads = re.findall(r"<h[23]>([^<]*)</h[23]>", index)
    at = heads.index("Closed division")
    assert heads[at:at + 6] == ["Closed division", "Available: fastest time to train at scale",
                                "Available: fastest per accelerator", "Open division",
                                "Available: fastest time to train at scale", "Available: fastest per accelerator"]
    assert heads[at + 6] == "Research, Development, or Internal: fastest time to train at scale"
    converged = [f for b in bert for f in b["files"] if f["epochs"] is not None]
    assert converged and re.search(rf">{re.escape(str(converged[0]['epochs']))} samples</td>", index)
