"""The machine-readable summary: result_summarizer's CSV columns, then the audit's verdict columns."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from mlperf_logging.result_summarizer import result_summarizer as rs

from mlrepro import atomic
from mlrepro.rulesets import SEED_ORDER, allowed_benchmarks

# After the official columns: where the row comes from and what the audit found.
VERDICT_COLUMNS = ("org", "system_folder", "system_desc", "package_checker", "files", "files_compliant",
                   "verdict_messages")


def official_columns(usage: str, ruleset: str) -> list[str]:
    return list(rs._get_column_schema(usage, ruleset).keys())


def columns(usage: str, ruleset: str) -> list[str]:
    per_benchmark = [f"{b}:{what}" for b in allowed_benchmarks(ruleset, usage)
                     for what in ("compliance", "rcp", "rcp_norm_factor", "verdict")]
    return official_columns(usage, ruleset) + list(VERDICT_COLUMNS) + per_benchmark


def row(org: dict[str, Any], system: dict[str, Any], usage: str, ruleset: str) -> dict[str, Any]:
    """One system's row; the official columns hold what the summarizer would print."""
    specs = system["specs"] or {}
    desc = system["desc"] or {}
    out: dict[str, Any] = {c: specs.get(c) for c in official_columns(usage, ruleset)}
    for b in allowed_benchmarks(ruleset, usage):
        out[b] = None
    if desc.get("submitter") is not None:
        out["details_url"] = rs._details_url(system["folder"], desc, usage, ruleset)
        out["code_url"] = rs._code_url(desc, usage, ruleset)
    files = [f for b in system["benchmarks"] for f in b["files"]]
    out.update(org=org["name"], system_folder=system["folder"], system_desc=system["desc_problem"] or "ok",
               package_checker="pass" if org["package"]["passed"] else "fail", files=len(files),
               files_compliant=sum(f["valid"] for f in files))
    messages = [system["desc_problem"]] if system["desc_problem"] else []
    for b in system["benchmarks"]:
        name = b["benchmark"]
        if not b["known"]:
            messages.append(f"{b['folder']}: {b['reason']}")
            continue
        out[name] = b["minutes"]
        out[f"{name}:compliance"] = f"{sum(f['valid'] for f in b['files'])}/{len(b['files'])}"
        if b["rcp"]:
            out[f"{name}:rcp"] = b["rcp"]["label"] or f"error: {b['rcp']['message']}"
            out[f"{name}:rcp_norm_factor"] = b["rcp"]["norm_factor"]
        out[f"{name}:verdict"] = "scored" if b["minutes"] is not None else f"no score: {b['reason']}"
        messages.extend(f"{b['folder']}: {p}" for p in b["problems"])
    out["verdict_messages"] = " | ".join(messages)
    return out


def sort_key(r: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(r.get(c) or "") for c in ("division", "availability", "submitter", "system", "system_folder"))


def _cell(v: Any) -> str:
    # pandas' to_csv: floats as repr, missing values empty
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return repr(v) if isinstance(v, float) else str(v)


def write(rows: list[dict[str, Any]], usage: str, ruleset: str, csv_path: str, json_path: str) -> None:
    cols = columns(usage, ruleset)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in cols])
    atomic.write_text(csv_path, buf.getvalue())
    atomic.write_json(json_path, [{c: r.get(c) for c in cols} for r in rows])


def seed_tables(rows: list[dict[str, Any]], usage: str, ruleset: str) -> dict[str, list[dict[str, Any]]]:
    """Per division, per benchmark: the fastest time at scale and the fastest per accelerator.

    The per-accelerator figure is the seed documents' "single accelerator" column: a single-node
    system's time to train multiplied by its accelerators.
    """
    present = allowed_benchmarks(ruleset, usage)
    order = [b for b in SEED_ORDER if b in present] + [b for b in present if b not in SEED_ORDER]
    tables: dict[str, list[dict[str, Any]]] = {}
    for division in sorted({r["division"] for r in rows if r.get("division")}):
        entries = []
        for b in order:
            scored = [r for r in rows if r.get("division") == division and r.get(b) is not None]
            if not scored:
                continue
            best = min(scored, key=lambda r: r[b])
            single = [r for r in scored if str(r.get("number_of_nodes")).strip() == "1"]
            best_single = min(single, key=lambda r: r[b] * r["accelerators_count"]) if single else None
            entries.append({
                "benchmark": b, "minutes": best[b], "system": best["system"], "org": best["org"],
                "system_folder": best["system_folder"], "accelerators": best["accelerators_count"],
                "per_accelerator": None if best_single is None else best_single[b] * best_single["accelerators_count"],
                "single_minutes": None if best_single is None else best_single[b],
                "single_system": None if best_single is None else best_single["system"],
                "single_org": None if best_single is None else best_single["org"],
                "single_folder": None if best_single is None else best_single["system_folder"],
                "single_accelerators": None if best_single is None else best_single["accelerators_count"],
            })
        tables[division] = entries
    return tables
