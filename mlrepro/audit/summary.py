"""The machine-readable summary: result_summarizer's CSV columns, then the audit's verdict columns.

The benchmark columns hold the published score (scaled, see ``scoring``); the audit's columns add
the raw score, both factors, the verdict of the chosen ruleset and the audit's sanity warnings.
"""

from __future__ import annotations

import csv
import inspect
import io
import math
from typing import Any

from mlperf_logging.result_summarizer import result_summarizer as rs

from mlrepro.audit import rcp_review
from mlrepro.audit.package import errors_of
from mlrepro.audit.scoring import SPEC_COLUMNS
from mlrepro.core import atomic
from mlrepro.core.rulesets import allowed_benchmarks, table_order

# After the official columns: where the row comes from and what the audit found.
# result_id: the published ID where a table was supplied, else the one derived by ``result_ids``'s rule
# (result_id_source says which; none: no system JSON, so no row of the published table);
# judged_by: the mlperf-logging release whose checks gave the verdicts (versions.label).
# consistency: the worst of the system's consistency checks (consistency.py): pass, warning or fail
VERDICT_COLUMNS = ("judged_by", "result_id", "result_id_source", "derived_result_id", "result_id_notes",
                   "availability_category", "org", "system_folder", "system_desc", "package_checker", "files",
                   "files_compliant", "sanity_warnings", "consistency", "verdict_messages")
# energy: joules to train as result_summarizer's "<benchmark>:Energy" (folders with power logs);
# energy_verdict: "scored", or why a folder with power logs has none (e.g. a zero-length window)
# consistency: the consistency checks' verdict (consistency.py): pass, or the worst severity and its findings
# rcp_table: which release's RCP table decided, as the review ended (rcp_review: "RCP for BS 4096: release 2.0.0")
PER_BENCHMARK = ("compliance", "rcp", "rcp_table", "rcp_norm_factor", "raw_score", "submitted_factor",
                 "computed_factor", "factor_check", "verdict", "consistency", "sanity", "energy", "energy_verdict")

# The official results table's availability categories, in its order, and the values seen for each.
CATEGORIES = ("Available cloud", "Available on-premise", "Preview", "Research, Development, or Internal (RDI)")
_CATEGORY_OF = {
    "available cloud": CATEGORIES[0], "cloud": CATEGORIES[0],
    "available on-premise": CATEGORIES[1], "available": CATEGORIES[1], "onprem": CATEGORIES[1],
    "on-premise": CATEGORIES[1], "on-prem": CATEGORIES[1],
    "preview": CATEGORIES[2],
    "research, development, or internal (rdi)": CATEGORIES[3], "research": CATEGORIES[3], "rdi": CATEGORIES[3],
    "development": CATEGORIES[3], "internal": CATEGORIES[3], "research, development, or internal": CATEGORIES[3],
}
# Where a result's score fails the RCP check that result_summarizer prints; the package checker
# may still accept it under rcp-bypass.
_RCP_FAILING = ("Fail", "Interp. Fail", "Missing", "No RCP", "Unknown state")


def category(availability: Any) -> str:
    """The official category of a system JSON's ``status`` ("" where it is missing or unknown)."""
    return _CATEGORY_OF.get(str(availability or "").strip().lower(), "")


def nodes(value: Any) -> float | None:
    """A count such as ``number_of_nodes`` as a number: "1", "1.0" and 1.0 are all one node."""
    try:
        n = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON integer of 400 digits
        return None
    return n if math.isfinite(n) else None


def official_columns(usage: str, ruleset: str) -> list[str]:
    return list(dict.fromkeys(rs._get_column_schema(usage, ruleset).keys()))


def columns(usage: str, ruleset: str) -> list[str]:
    per_benchmark = [f"{b}:{what}" for b in dict.fromkeys(allowed_benchmarks(ruleset, usage)) for what in PER_BENCHMARK]
    return official_columns(usage, ruleset) + list(VERDICT_COLUMNS) + per_benchmark


def _verdict(b: dict[str, Any], errors: list[str]) -> tuple[str, bool]:
    """(verdict text, whether the result may be ranked) of one scored or unscored benchmark; the judging
    release's RCP error yields to the table of a later release where that decides (``rcp_review``)."""
    review = b.get("rcp_review") or {}
    by_later = review.get("source") == "later release"
    if by_later and review.get("passed"):
        errors = [e for e in errors if not rcp_review.is_rcp_error(e)]
    elif by_later:
        errors = [*errors, f"{review['label']}: {review['message']}"]
    table = f"; {review['label']}" if review else ""
    if b["minutes"] is None:
        return f"no score: {b['reason']}", False
    if errors:
        return "fail: " + " | ".join(errors), False
    label = (b["rcp"] or {}).get("label", "")
    if label in _RCP_FAILING and not (by_later and review.get("passed")):
        return f"scored; RCP {label} accepted by rcp-bypass{table}", True
    return f"scored{table}", True


CONSISTENCY_LEVELS = ("fail", "warning", "note")  # the consistency checks' levels, worst first
NAMED_FILES = 3  # a finding of more result files counts them in its column (audit.json and the report list them)


def consistency_text(finding: dict[str, Any]) -> str:
    """A consistency finding (consistency.grouped) as the audit's columns show it: its level first, then the
    files it holds for."""
    files = finding["files"]
    if not files:
        where = ""
    elif finding["check"] == "power":  # its files are power logs: each is named
        where = f"{', '.join(files)}: "
    elif len(files) <= NAMED_FILES:
        where = f"{', '.join(files)} ({len(files)} of {finding['of']} result files): "
    else:
        where = f"{len(files)} of {finding['of']} result files: "
    return f"{finding['severity']}: {where}{finding['message']}"


def consistency_verdict(findings: list[dict[str, Any]]) -> str:
    """A consistency column's text: pass, or every finding (one per fact, worst first), each starting with its
    level (``fail:``, ``warning:``, ``note:``)."""
    return " | ".join(consistency_text(f) for f in findings) if findings else "pass"


def _details_url(folder: str, desc: dict[str, Any], usage: str, ruleset: str) -> str:
    """The summarizer's details_url; its arguments differ by release (the system file's name from 2.0 on)."""
    arity = len(inspect.signature(rs._details_url).parameters)
    return str(rs._details_url(*(folder, desc, usage, ruleset)[4 - arity:]) if arity > 2
               else rs._details_url(desc, ruleset))


def row(org: dict[str, Any], system: dict[str, Any], usage: str, ruleset: str,
        result_id: dict[str, Any] | None, judged_by: str = "") -> dict[str, Any]:
    """One system's row; the official columns hold what the summarizer publishes (scaled scores);
    ``result_id``: the system JSON's entry of ``result_ids.IdTable`` (None: the system has no JSON);
    ``judged_by``: the mlperf-logging release whose rules gave the verdicts."""
    specs = system["specs"] or {}
    desc = system["desc"] or {}
    # the judging release's columns first; the system columns an older release lacks (number_of_nodes
    # before 2.0) stay in the row for the tables, outside the CSV
    out: dict[str, Any] = {c: specs.get(c) for c in official_columns(usage, ruleset)}
    out.update({k: specs.get(k) for k in SPEC_COLUMNS if k not in out})
    for b in allowed_benchmarks(ruleset, usage):
        out[b] = None
    if desc.get("submitter") is not None:
        out["details_url"] = _details_url(system["folder"], desc, usage, ruleset)
        out["code_url"] = rs._code_url(desc, usage, ruleset)
    files = [f for b in system["benchmarks"] for f in b["files"]]
    system_errors = errors_of(org["package"], system["folder"])
    rid = result_id or {"id": None, "source": "none", "derived": None,
                        "notes": [f"no systems/{system['folder']}.json: no row of the published table"]}
    out.update(judged_by=judged_by, result_id=rid["id"], result_id_source=rid["source"],
               derived_result_id=rid["derived"], result_id_notes=" | ".join(rid["notes"]),
               availability_category=category(specs.get("availability", desc.get("status"))),
               org=org["name"], system_folder=system["folder"], system_desc=system["desc_problem"] or "ok",
               package_checker="fail" if system_errors else "pass", files=len(files),
               files_compliant=sum(f["valid"] for f in files),
               sanity_warnings=sum(len(f.get("sanity", [])) for f in files))
    messages = [system["desc_problem"]] if system["desc_problem"] else []
    ranked: list[str] = []
    severities: set[str] = set()
    for b in system["benchmarks"]:
        name = b["benchmark"]
        if not b["known"]:
            messages.append(f"{b['folder']}: {b['reason']}")
            continue
        out[name] = b["minutes"]
        out[f"{name}:compliance"] = f"{sum(f['valid'] for f in b['files'])}/{len(b['files'])}"
        if b["rcp"]:
            out[f"{name}:rcp"] = b["rcp"]["label"] or f"error: {b['rcp']['message']}"
        if b.get("rcp_review"):
            out[f"{name}:rcp_table"] = b["rcp_review"]["label"]
        out[f"{name}:rcp_norm_factor"] = b["scaling_factor"] if b["minutes"] is not None else None
        out[f"{name}:raw_score"] = b["raw_minutes"]
        out[f"{name}:submitted_factor"] = b["submitted_factor"]
        out[f"{name}:computed_factor"] = b["computed_factor"]
        if b["submitted_factor"] is not None or b["computed_factor"] is not None:
            out[f"{name}:factor_check"] = "DISAGREE" if b["factor_disagrees"] else "agree"
        verdict, ok = _verdict(b, errors_of(org["package"], system["folder"], b["folder"]))
        out[f"{name}:verdict"] = verdict
        findings = b.get("consistency") or []
        out[f"{name}:consistency"] = consistency_verdict(findings)
        severities |= {f["severity"] for f in findings}
        if ok:
            ranked.append(name)
        if b["has_power"]:
            out[f"{name}:energy"] = b["energy_j"]
            out[f"{name}:energy_verdict"] = ("scored" if b["energy_j"] is not None
                                             else f"no energy: {b['energy_problem']}")
        out[f"{name}:sanity"] = " | ".join(f"{f['name']}: {w}" for f in b["files"] for w in f.get("sanity", []))
        messages.extend(f"{b['folder']}: {p}" for p in b["problems"])
    out["consistency"] = next((level for level in CONSISTENCY_LEVELS if level in severities), "pass")
    out["ranked"] = ranked  # the benchmarks whose score passes every check (for the tables, not the CSV)
    out["verdict_messages"] = " | ".join(messages)
    return out


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(v: Any) -> str:
    # pandas' to_csv: floats as repr, missing values empty
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (int, float)):
        return repr(v) if isinstance(v, float) else str(v)
    text = str(v)
    # OWASP CSV injection: a text cell a spreadsheet would run as a formula starts with a quote
    return "'" + text if text.startswith(_FORMULA_START) else text


def write(rows: list[dict[str, Any]], usage: str, ruleset: str, csv_path: str, json_path: str) -> None:
    cols = columns(usage, ruleset)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in cols])
    atomic.write_text(csv_path, buf.getvalue())
    atomic.write_json(json_path, [{c: r.get(c) for c in cols} for r in rows])


def _per_accelerator(r: dict[str, Any], b: str) -> float | None:
    """Accelerator-minutes of a single-node system (None for others and systems without accelerators)."""
    count = r.get("accelerators_count")
    if nodes(r.get("number_of_nodes")) != 1 or not isinstance(count, (int, float)) or count <= 0:
        return None
    return float(r[b] * count)


def _entry(r: dict[str, Any] | None, b: str, prefix: str = "") -> dict[str, Any]:
    keys = ("minutes", "system", "org", "system_folder", "accelerators", "verdict")
    if r is None:
        return {prefix + k: None for k in keys}
    values = (r[b], r.get("system") or r["system_folder"], r["org"], r["system_folder"], r.get("accelerators_count"),
              r.get(f"{b}:verdict"))
    return {prefix + k: v for k, v in zip(keys, values, strict=True)}


def _fastest(rows: list[dict[str, Any]], usage: str, ruleset: str) -> list[dict[str, Any]]:
    """Per benchmark: the fastest time at scale and the fastest per accelerator among ``rows``."""
    entries = []
    for b in table_order(ruleset, usage):
        scored = [r for r in rows if r.get(b) is not None]
        if not scored:
            continue
        ok = [r for r in scored if b in r.get("ranked", ())]
        best = min(ok, key=lambda r: r[b], default=None)
        faster_failing = [r for r in scored if r not in ok and (best is None or r[b] < best[b])]
        failing = min(faster_failing, key=lambda r: r[b], default=None)
        single = [r for r in ok if _per_accelerator(r, b) is not None]
        best_single = min(single, key=lambda r: _per_accelerator(r, b), default=None)  # type: ignore[arg-type,return-value]
        single_failing = [r for r in scored if r not in ok and _per_accelerator(r, b) is not None
                          and (best_single is None or _per_accelerator(r, b) < _per_accelerator(best_single, b))]  # type: ignore[operator]
        worst = min(single_failing, key=lambda r: _per_accelerator(r, b), default=None)  # type: ignore[arg-type,return-value]
        entries.append({
            "benchmark": b, **_entry(best, b), **_entry(failing, b, "failing_"),
            "per_accelerator": None if best_single is None else _per_accelerator(best_single, b),
            **_entry(best_single, b, "single_"),
            "single_failing_per_accelerator": None if worst is None else _per_accelerator(worst, b),
            **_entry(worst, b, "single_failing_"),
        })
    return entries


def _divisions(rows: list[dict[str, Any]]) -> list[str]:
    """closed, then open, as the published tables; any other value after them."""
    found = {r["division"] for r in rows if r.get("division")}
    return [d for d in ("closed", "open") if d in found] + sorted(found - {"closed", "open"})


def seed_tables(rows: list[dict[str, Any]], usage: str, ruleset: str) -> dict[str, list[dict[str, Any]]]:
    """Per division, per benchmark: the fastest time at scale and the fastest per accelerator,
    over every availability category (the seed documents' view; ``category_tables`` keeps them apart).

    Only results that pass every check of the ruleset are ranked; a failing result that would
    have been faster is listed beside the winner (``*_failing``), never in its place. The
    per-accelerator figure is the seed documents' "single accelerator" column: a single-node
    system's time to train multiplied by its accelerators.
    """
    return {d: _fastest([r for r in rows if r.get("division") == d], usage, ruleset) for d in _divisions(rows)}


# The published tables' availability groups: both "Available" categories form one table.
GROUPS = {CATEGORIES[0]: "Available", CATEGORIES[1]: "Available", CATEGORIES[2]: "Preview",
          CATEGORIES[3]: "Research, Development, or Internal"}
UNKNOWN_GROUP = "Unknown availability"


def category_tables(rows: list[dict[str, Any]], usage: str, ruleset: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """As the published tables read: closed, then open; within each, available, preview and research
    systems each ranked on their own (a system whose ``status`` names no known category apart)."""
    tables: dict[str, dict[str, list[dict[str, Any]]]] = {}
    order = [*dict.fromkeys(GROUPS.values()), UNKNOWN_GROUP]
    for d in _divisions(rows):
        in_division = [r for r in rows if r.get("division") == d]
        groups = {g: [r for r in in_division if GROUPS.get(r.get("availability_category") or "", UNKNOWN_GROUP) == g]
                  for g in order}
        tables[d] = {g: _fastest(members, usage, ruleset) for g, members in groups.items() if members}
    return tables
