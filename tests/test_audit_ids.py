"""The official result IDs (issue 28): derived by the published table's order, or read from a supplied table.

Constructed rounds show that each key of the rule decides the order (and ignores case); the public
Training v1.1 round (``../shared/data``, skipped when absent) shows that every system JSON gets one
ID, none repeats, the order does not depend on how the round is listed, and that the summary CSV,
its JSON and the HTML report carry the ID of every row.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlrepro.audit import discover, pipeline, result_ids
from mlrepro.audit import report as audit_report
from mlrepro.audit.check import check_round

REPO = Path(__file__).resolve().parents[1]
ROUND_FIXTURE = Path(__file__).parent / "fixtures" / "audit" / "round"
RULESET = "1.1.0"

# One system JSON that ties with another on every key; a case changes one key.
BASE = {"division": "closed", "status": "onprem", "submitter": "Acme", "accelerator_model_name": "X100",
        "number_of_nodes": 1, "accelerators_per_node": 8, "system_name": "box", "framework": "torch"}
# Per key of the rule, in its order: (values for the system that comes first, for the one after).
# Where text is compared, the first value sorts after the second in plain (case-sensitive) order.
KEY_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("division", {"division": "closed"}, {"division": "open"}),
    ("category", {"status": "cloud"}, {"status": "onprem"}),
    ("category", {"status": "available"}, {"status": "preview"}),
    ("category", {"status": "preview"}, {"status": "research"}),
    ("submitter", {"submitter": "acme"}, {"submitter": "Beta"}),
    ("accelerator", {"accelerator_model_name": "a100"}, {"accelerator_model_name": "H100"}),
    ("accelerators", {"number_of_nodes": 1, "accelerators_per_node": 8},
     {"number_of_nodes": 2, "accelerators_per_node": 5}),
    ("accelerators", {"number_of_nodes": "2", "accelerators_per_node": "4"},
     {"number_of_nodes": 1, "accelerators_per_node": 16}),
    ("system_name", {"system_name": "box-a"}, {"system_name": "BOX-B"}),
    ("framework", {"framework": "mxnet"}, {"framework": "PyTorch"}),
]
# The values that make every later key point the other way (so that only the key under test can decide).
AGAINST = {"category": {"status": "research"}, "submitter": {"submitter": "Zeta"},
           "accelerator": {"accelerator_model_name": "Z100"},
           "accelerators": {"number_of_nodes": 9, "accelerators_per_node": 9},
           "system_name": {"system_name": "zzz"}, "framework": {"framework": "zzz"}}
ORDER = ["division", "category", "submitter", "accelerator", "accelerators", "system_name", "framework"]


def write_round(root: Path, systems: dict[tuple[str, str], Any]) -> Path:
    """A round of system JSONs (``(org, name) -> JSON value``, or bytes written as they are)."""
    for (org, name), desc in systems.items():
        (root / org / "results").mkdir(parents=True, exist_ok=True)
        (root / org / "systems").mkdir(exist_ok=True)
        path = root / org / "systems" / f"{name}.json"
        path.write_bytes(desc if isinstance(desc, bytes) else json.dumps(desc).encode())
    return root


def ids_of(root: Path, ruleset: str = "2.0.0", published: Path | None = None) -> result_ids.IdTable:
    return result_ids.assign(discover.find_orgs(root), root, ruleset, published)


def order_of(table: result_ids.IdTable) -> list[str]:
    return [e.keys.system for e in table.entries]


@pytest.mark.parametrize(("key", "first", "second"), KEY_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(KEY_CASES)])
def test_each_key_decides_the_order(tmp_path: Path, key: str, first: dict[str, Any], second: dict[str, Any]) -> None:
    # every later key, the organisation and the file name favour the other system
    later = {k: v for name in ORDER[ORDER.index(key) + 1:] for k, v in AGAINST.get(name, {}).items()}
    root = write_round(tmp_path, {("Zorg", "z-first"): {**BASE, **later, **first},
                                  ("Aorg", "a-second"): {**BASE, **second}})
    table = ids_of(root)
    assert order_of(table) == ["z-first", "a-second"]
    assert [e.id for e in table.entries] == ["2.0-2000", "2.0-2001"]
    assert all(e.source == "derived" and not e.notes for e in table.entries)


@pytest.mark.parametrize("key", ["submitter", "accelerator_model_name", "system_name", "framework", "division"])
def test_case_alone_never_decides(tmp_path: Path, key: str) -> None:
    # the same value in other case ties; the file name (the tie's order) then decides, whatever the case
    upper, lower = BASE[key].upper(), BASE[key].lower()
    root = write_round(tmp_path / "one", {("Acme", "a"): {**BASE, key: upper}, ("Acme", "b"): {**BASE, key: lower}})
    assert order_of(ids_of(root)) == ["a", "b"]
    root2 = write_round(tmp_path / "two", {("Acme", "a"): {**BASE, key: lower}, ("Acme", "b"): {**BASE, key: upper}})
    assert order_of(ids_of(root2)) == ["a", "b"]


def test_open_division_follows_closed_and_the_round_names_the_prefix(tmp_path: Path) -> None:
    systems = {("Acme", f"s{i}"): {**BASE, "division": d, "system_name": f"n{i}"}
               for i, d in enumerate(["open", "closed", "open", "closed", "closed"])}
    table = ids_of(write_round(tmp_path, systems), "3.1.0")
    assert [e.keys.division for e in table.entries] == ["closed"] * 3 + ["open"] * 2
    assert [e.id for e in table.entries] == [f"3.1-{2000 + i}" for i in range(5)]


def test_every_on_premise_status_is_one_category(tmp_path: Path) -> None:
    # v2.0 writes on-premise three ways ("onprem", "available", "Available on-premise"), and its cited IDs
    # hold only if all three are one category, after cloud: the submitter alone orders them
    statuses = {"c": "onprem", "a": "available", "b": "Available on-premise", "z": "cloud", "r": "research"}
    systems = {("Acme", f"s-{s}"): {**BASE, "status": status, "submitter": s} for s, status in statuses.items()}
    table = ids_of(write_round(tmp_path, systems))
    assert order_of(table) == ["s-z", "s-a", "s-b", "s-c", "s-r"]
    assert [e.keys.category for e in table.entries[1:4]] == ["Available on-premise"] * 3
    assert not any(e.notes for e in table.entries)


@pytest.fixture
def v11(v11_round: Path) -> Path:
    """The whole v1.1 round, the session's (tests/rounds.py): read only."""
    return v11_round


def _rule_key(desc: dict[str, Any]) -> tuple[Any, ...]:
    """The rule written out again from the raw JSON, independently of ``result_ids``."""
    categories = {"cloud": 0, "onprem": 1, "available": 1, "preview": 2, "research": 3}
    return (["closed", "open"].index(desc["division"]), categories[desc["status"]], desc["submitter"].lower(),
            desc["accelerator_model_name"].lower(), int(desc["number_of_nodes"]) * int(desc["accelerators_per_node"]),
            desc["system_name"].lower(), desc["framework"].lower())


def test_v11_every_system_json_has_one_id_in_the_rules_order(v11: Path) -> None:
    jsons = sorted(v11.glob("*/systems/*.json"))
    table = ids_of(v11, RULESET)
    assert len(table.entries) == len(jsons) == 73
    assert {(e.keys.org, e.keys.system) for e in table.entries} == {(p.parents[1].name, p.stem) for p in jsons}
    ids = [e.id for e in table.entries]
    assert ids == [f"1.1-{2000 + i}" for i in range(len(jsons))]  # one each, none repeated, no gap
    raw = {(e.keys.org, e.keys.system): json.loads((v11 / e.keys.org / "systems" / f"{e.keys.system}.json").read_text())
           for e in table.entries}
    keys = [_rule_key(raw[e.keys.org, e.keys.system]) for e in table.entries]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)  # in v1.1 the rule's keys alone decide: no tie left to our order
    # the keys at work in this round: both divisions, two categories, counts that sort as numbers, not text
    assert {k[0] for k in keys} == {0, 1} and {k[1] for k in keys} == {1, 3}
    habana = [e.keys.accelerators for e in table.entries if e.keys.submitter == "HabanaLabs"]
    assert habana == [8, 16, 32, 64, 128, 256]
    # the only JSON without a framework is still numbered, with its note
    (bare,) = [e for e in table.entries if e.notes]
    assert bare.keys.system == "SYS-420GP-TNAR" and "framework is missing" in bare.notes[0]


def test_v11_order_does_not_depend_on_the_listing(v11: Path) -> None:
    table = ids_of(v11, RULESET)
    keys = [e.keys for e in table.entries]
    for seed in range(3):
        shuffled = keys[:]
        random.Random(seed).shuffle(shuffled)
        assert [(e.keys, e.id) for e in result_ids.derive(shuffled, RULESET)] == [(e.keys, e.id) for e in table.entries]
    assert [e.to_dict() for e in ids_of(v11, RULESET).entries] == [e.to_dict() for e in table.entries]


def write_table(path: Path, rows: list[tuple[str, str, str]], header: str = "org,system,id") -> Path:
    path.write_text(header + "\n" + "".join(f"{o},{s},{i}\n" for o, s, i in rows))
    return path


def test_published_table_wins_and_disagreements_are_listed(v11: Path, tmp_path: Path) -> None:
    derived = ids_of(v11, RULESET).entries
    rows = [(e.keys.org, e.keys.system, e.derived) for e in derived]
    (o0, s0, i0), (o1, s1, i1) = rows[0], rows[1]
    rows[0], rows[1] = (o0, s0, i1), (o1, s1, i0)  # two rows swapped
    gone = rows.pop()  # a system the table does not list
    rows.append(("Nobody", "ghost", "1.1-2999"))  # a row without a system JSON here
    rows = rows[:5] + [(o, s, i.replace("1.1-", "1.1-9")) for o, s, i in rows[5:8]] + rows[8:]  # three renumbered
    table = ids_of(v11, RULESET, write_table(tmp_path / "ids.csv", rows))
    by = table.by_system()
    assert by[o0, s0].id == i1 and by[o0, s0].derived == i0 and by[o0, s0].source == "published"
    assert by[o0, s0].notes == [f"the rule derives {i0}"]
    assert f"{o0}/{s0}: published {i1}, derived {i0}" in table.disagreements
    assert len(table.disagreements) == 5
    missing = by[gone[0], gone[1]]
    assert (missing.id, missing.source) == (gone[2], "derived")
    assert missing.notes == ["not in the published table: the derived ID is shown"]
    assert table.not_in_package == ["Nobody/ghost: 1.1-2999"]
    assert table.published_table == "ids.csv"
    assert len({e.id for e in table.entries}) == len(table.entries)


def test_a_derived_id_that_is_another_rows_published_id_is_a_disagreement(tmp_path: Path) -> None:
    root = write_round(tmp_path / "round", {("Acme", "a"): BASE, ("Acme", "b"): {**BASE, "framework": "zzz"}})
    table = ids_of(root, published=write_table(tmp_path / "ids.csv", [("Acme", "a", "2.0-2001")]))
    assert [(e.keys.system, e.id, e.source) for e in table.entries] == [("a", "2.0-2001", "published"),
                                                                       ("b", "2.0-2001", "derived")]
    assert table.disagreements == ["Acme/a: published 2.0-2001, derived 2.0-2000",
                                   "Acme/b: its derived ID 2.0-2001 is the published ID of Acme/a"]


@pytest.mark.parametrize(("content", "message"), [
    (b"org,system\nAcme,a\n", "no column id in the header"),
    (b"org,system,id\nAcme,a,2.0-2000\nAcme,a,2.0-2001\n", "line 3: Acme/a is listed twice"),
    (b"org,system,id\nAcme,a,2.0-2000\nAcme,b,2.0-2000\n", "line 3: ID 2.0-2000 is also given to Acme/a"),
    (b"org,system,id\nAcme,a,\n", "line 2: org, system and id must all be given"),
    (b"org,system,id\nAcme,a,2.0\x00-1\n", "is no result ID"),
    (b"org,system,id\nAcme,a," + b"9" * 100 + b"\n", "is no result ID"),
    (b"\xff\xfeorg", "cannot be read"),
    (b"org,system,id\n\n\nAcme,\"a\n" + b"x" * 200_000 + b"\",2.0-2000\n", "line 5: not CSV (field larger than"),
    (b"org,system,id\nAcme,\"multi\nline\",2.0-2000\nAcme,\"multi\nline\",2.0-2001\n", "line 5: Acme/multi\nline is"),
])
def test_a_bad_published_table_is_named(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "ids.csv"
    path.write_bytes(content)
    with pytest.raises(result_ids.PublishedTableError, match=re.escape(message)) as e:
        result_ids.read_published(path)
    assert str(path) in str(e.value)


def test_bom_case_and_column_order_of_a_table_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "ids.csv"
    path.write_bytes(b"\xef\xbb\xbfID , Org,System\r\n2.0-2000,Acme,a\r\n\r\n")
    assert result_ids.read_published(path) == {("Acme", "a"): "2.0-2000"}


HOSTILE: dict[tuple[str, str], Any] = {
    ("Mallory", "empty"): {},
    ("Mallory", "list"): [1, 2],
    ("Mallory", "not-json"): b"{nope",
    ("Mallory", "latin1"): '{"submitter": "M\xe4llory"}'.encode("latin-1"),
    ("Mallory", "deep"): b"[" * 100_000 + b"]" * 100_000,
    ("Mallory", "counts"): {**BASE, "number_of_nodes": "eight", "accelerators_per_node": True},
    ("Mallory", "huge-count"): {**BASE, "number_of_nodes": int("9" * 400), "accelerators_per_node": -1},
    ("Mallory", "nan"): {**BASE, "number_of_nodes": "NaN", "accelerators_per_node": "inf"},
    ("Mallory", "objects"): {**BASE, "submitter": {"a": 1}, "framework": ["x"], "system_name": None},
    ("Mallory", "script"): {**BASE, "submitter": "<script>alert(1)</script>", "system_name": "S" * 300_000,
                            "status": "<b>soon</b>", "division": "<i>closed</i>"},
    ("Acme", "fine"): BASE,
}


def test_hostile_system_jsons_get_ids_and_verdicts(tmp_path: Path) -> None:
    root = write_round(tmp_path / "round", HOSTILE)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(BASE))
    os.symlink(outside, root / "Mallory" / "systems" / "escape.json")
    os.mkfifo(root / "Mallory" / "systems" / "fifo.json")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "stolen.json").write_text(json.dumps(BASE))
    (root / "Eve" / "results").mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere", root / "Eve" / "systems")  # a symlinked folder is not followed
    (root / "Acme" / "results" / "no-json" / "bert").mkdir(parents=True)  # results without a system JSON
    table = ids_of(root, RULESET)
    by = {e.keys.system: e for e in table.entries}
    assert set(by) == {name for _, name in HOSTILE} | {"escape", "fifo"}  # none skipped, "stolen" not read
    assert len({e.id for e in table.entries}) == len(table.entries)
    assert table.entries[0].keys.system == "fine"  # a system with every key comes before those without
    notes = {name: " | ".join(e.notes) for name, e in by.items()}
    assert "is not a JSON object" in notes["list"]
    assert "unreadable (JSONDecodeError)" in notes["not-json"]
    assert "unreadable (UnicodeDecodeError)" in notes["latin1"]
    assert "unreadable (RecursionError)" in notes["deep"]
    assert "symlink out of the package" in notes["escape"] and "not a regular file" in notes["fifo"]
    assert "number_of_nodes is not a count ('eight')" in notes["counts"]
    assert "accelerators_per_node is not a count ('True')" in notes["counts"]
    assert "accelerators_per_node is not a count ('-1')" in notes["huge-count"]
    assert "number_of_nodes is not a count ('NaN')" in notes["nan"]
    assert "submitter is not text (dict)" in notes["objects"] and "system_name is missing" in notes["objects"]
    assert "division '<i>closed</i>' is neither closed nor open" in notes["script"]
    assert "status '<b>soon</b>' is no known availability category" in notes["script"]
    assert "submitter is missing" in notes["empty"]

    # the whole summarize step and the report on the same round: no crash, every ID shown, escaped
    out = tmp_path / "out"
    checks = check_round(root, out / "checks.json", out / ".cache", "training", RULESET, 1)
    audit = pipeline.summarize(root, checks, "training", RULESET)
    pipeline.write_summary(audit, out)
    audit_report.write(audit, out / "report")
    *with_id, no_json = audit["rows"]
    assert [r["result_id"] for r in with_id] == [e.id for e in table.entries]  # a row for every JSON, in order
    assert (no_json["system_folder"], no_json["result_id"], no_json["result_id_source"]) == ("no-json", None, "none")
    assert no_json["result_id_notes"] == "no systems/no-json.json: no row of the published table"
    index = (out / "report" / "index.html").read_text()
    assert "<script>alert" not in index and "&lt;script&gt;alert(1)&lt;/script&gt;" in index
    assert "<b>soon</b>" not in index and "S" * 5000 not in index and "shortened: 300000 characters" in index


@pytest.mark.integration
def test_v11_summary_and_report_carry_every_rows_id(v11: Path, v11_summary: Path, tmp_path: Path) -> None:
    # the real audit, as the rules run it: the session's check and summarize steps (tests/rounds.py, v11_checks and
    # v11_summary; shared with tests/test_audit_consistency.py), given the published table of the first ten systems
    derived = ids_of(v11, RULESET)
    published = v11_summary.parent / "ids.csv"
    assert published.read_bytes() == write_table(tmp_path / "ids.csv", [
        (e.keys.org, e.keys.system, e.derived) for e in derived.entries[:10]]).read_bytes()
    out = Path(shutil.copytree(v11_summary, tmp_path / "out"))  # a private copy: a summarize step runs in it below
    summarize = [sys.executable, "-m", "mlrepro.audit", "summarize", "--root", str(v11), "--out", str(out),
                 "--ruleset", RULESET, "--result-ids"]

    with open(out / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 73
    assert [r["result_id"] for r in rows] == [e.id for e in derived.entries]  # in the table's order
    assert [r["result_id_source"] for r in rows] == ["published"] * 10 + ["derived"] * 63
    assert all(r["derived_result_id"] == r["result_id"] for r in rows)
    summary_json = json.loads((out / "summary.json").read_text())
    assert [r["result_id"] for r in summary_json] == [r["result_id"] for r in rows]
    audit = json.loads((out / "audit.json").read_text())
    assert audit["result_ids"]["published_table"] == "ids.csv" and audit["result_ids"]["disagreements"] == []

    index = (out / "report" / "index.html").read_text()
    assert "derived</em> by the rule below" in index and "Known uncertainties" in index
    for r in rows:
        page = (out / "report" / audit_report.system_page(r["org"], r["system_folder"])).read_text()
        assert f">{r['result_id']}</td>" in page
        # the scores table and the ID table both link the ID to the system's page
        link = f'<a href="{audit_report.system_page(r["org"], r["system_folder"])}">{r["result_id"]}</a>'
        assert index.count(link) == 2, r["result_id"]

    before = (out / "summary.csv").read_bytes()
    bad = write_table(tmp_path / "bad.csv", [("Baidu", "x", "1.1-1"), ("Baidu", "x", "1.1-2")])
    proc = subprocess.run([*summarize, str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2 and f"audit_result_ids={bad}, line 3: Baidu/x is listed twice" in proc.stderr
    assert (out / "summary.csv").read_bytes() == before  # the earlier summary is kept


@pytest.mark.integration
def test_snakemake_passes_the_published_table(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    shutil.copytree(ROUND_FIXTURE, package)
    (tmp_path / "ids.csv").write_text("org,system,id\nGoogle,tpu-v4-4096-TF,1.1-2077\n")
    proc = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-s", str(REPO / "Snakefile"),
                           "-d", str(tmp_path), "--cores", "2", "--config", f"audit={package}", "ruleset=1.1.0",
                           "audit_out=out", "audit_result_ids=ids.csv"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {r["system_folder"]: r for r in json.loads((tmp_path / "out" / "summary.json").read_text())}
    tf = rows["tpu-v4-4096-TF"]
    assert (tf["result_id"], tf["result_id_source"], tf["derived_result_id"]) == ("1.1-2077", "published", "1.1-2002")
    assert [rows[s]["result_id"] for s in ("1_node_8_A100_NGC21.05_MXNet", "1_node_8_A100_PaddlePaddle",
                                           "tpu-v4-2048-JAX")] == ["1.1-2000", "1.1-2001", "1.1-2003"]
