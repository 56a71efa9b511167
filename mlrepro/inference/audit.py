"""Audit of a published inference round (or one division or organisation of it): the inference_audit rule's job.

Every ``<division>/<org>/results/<system>/<benchmark>/<scenario>/`` gets a verdict: its
``performance/run_1/mlperf_log_summary.txt`` read (VALID/INVALID as LoadGen printed it, the metric),
or why it could not be (missing, truncated, foreign). Every ``systems/<system>.json`` gets one too:
its accelerator count (``accelerators_per_node`` x ``number_of_nodes``, cast from strings), or why
not. Offline throughput per accelerator = samples per second / accelerators, for every Offline result
of a system with accelerators; the seed-style table has one row per system and one column per benchmark.

Writes OUT/inference_results.{csv,json}, OUT/inference_table.csv (per system), OUT/inference_seed_table.csv
(the seed documents' layout: benchmark x accelerator, the best VALID value) and OUT/inference_report.html;
nothing inside the round.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from pathlib import Path
from typing import Any

from mlrepro.core import atomic, safe_read
from mlrepro.core.job import Job
from mlrepro.inference import summary
from mlrepro.report.render import render

DIVISIONS = ("closed", "open", "network")
SUMMARY_PATH = Path("performance") / "run_1" / "mlperf_log_summary.txt"
RESULT_FIELDS = ("division", "org", "system", "benchmark", "scenario", "file", "status", "verdict", "metric",
                 "metric_name", "units", "inferred", "accelerators", "per_accelerator", "message")


def linked(path: Path, root: Path) -> bool:
    """Whether ``path`` or a folder between it and ``root`` is a symlink (the training audit refuses them: a
    link may lead out of the round, or count one result twice)."""
    p = path
    while p != root and root in p.parents:
        if p.is_symlink():
            return True
        p = p.parent
    return False


def find_orgs(root: Path) -> list[Path]:
    """Organisation folders (those with results/) at ROOT, one or two levels down; none through a symlink."""
    candidates = [root, *root.glob("*"), *root.glob("*/*")]
    return sorted(p for p in candidates if p.is_dir() and not linked(p, root) and (p / "results").is_dir()
                  and not (p / "results").is_symlink())


# Far above any real system (accelerators per node, nodes); a count beyond them is not a system description.
MAX_PER_NODE, MAX_NODES = 100_000, 1_000_000


def _count(value: object, key: str, low: int, high: int) -> int:
    """A count a system JSON states (a number or a string of one): whole, finite, from ``low`` to ``high``."""
    text = str(value).strip()[:60]
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{key} {text!r} is not a number") from None
    if not math.isfinite(number) or number != int(number) or not low <= number <= high:
        raise ValueError(f"{key} {text!r} is not a whole number from {low} to {high}")
    return int(number)


def system_accelerators(path: Path) -> tuple[int | None, str, str]:
    """(accelerators, model name, problem) of one system JSON; None with the reason when unusable."""
    if path.is_symlink():
        return None, "", "not a regular file"
    try:  # bounded as the training audit reads a package's JSON: size, depth, regular files only
        desc = safe_read.read_json(path, max_bytes=summary.MAX_BYTES)
    except safe_read.UnsafeInput as e:
        return None, "", str(e).removeprefix(f"{path}: ")
    if not isinstance(desc, dict):
        return None, "", "not a JSON object"
    model = str(desc.get("accelerator_model_name", ""))[:200]
    if "accelerators_per_node" not in desc:
        return None, model, "no accelerators_per_node"
    try:
        per_node = _count(desc["accelerators_per_node"], "accelerators_per_node", 0, MAX_PER_NODE)
        nodes = _count(desc.get("number_of_nodes", 1) or 1, "number_of_nodes", 1, MAX_NODES)
    except ValueError as e:
        return None, model, str(e)
    return per_node * nodes, model, ""


def scenario_name(folder: str) -> str | None:
    """The LoadGen scenario a folder names; open-division submitters wrote them in lower case."""
    return next((s for s in summary.SCENARIOS if s.lower() == folder.lower()), None)


def summary_file(path: Path, root: Path) -> dict[str, Any]:
    """A verdict for any mlperf_log_summary.txt: a results summary, an accuracy run's (LoadGen writes only
    its warning and error counts there), or not a LoadGen summary at all."""
    entry: dict[str, Any] = {"file": str(path.relative_to(root)), "scenario": None, "mode": None, "verdict": None}
    try:
        s = summary.read(path)
    except summary.SummaryError as e:
        text = ""
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as f:
                text = f.read(summary.MAX_BYTES).decode("utf-8", errors="replace")
        if "MLPerf Results Summary" not in text and text.strip().endswith("errors encountered during test."):
            return {**entry, "status": "ok", "kind": "accuracy-mode summary (counts only)", "message": ""}
        return {**entry, "status": "error", "kind": "unreadable", "message": str(e).removeprefix(f"{path}: ")}
    return {**entry, "status": "ok", "kind": "results summary", "scenario": s.scenario, "mode": s.mode,
            "verdict": None if s.valid is None else ("VALID" if s.valid else "INVALID"), "message": ""}


def _failed(path: Path, root: Path, e: Exception) -> str:
    """An entry's unforeseen failure as its own verdict (the round goes on): the file and what went wrong."""
    return f"{path.relative_to(root)}: not judged ({type(e).__name__}: {str(e)[:200]})"


def audit(root: Path) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    summaries = []
    for p in sorted(root.rglob("mlperf_log_summary.txt")):
        if linked(p.parent, root):
            summaries.append({"file": str(p.relative_to(root)), "scenario": None, "mode": None, "verdict": None,
                              "status": "error", "kind": "unreadable",
                              "message": "in a folder reached through a symlink; not read"})
            continue
        try:
            summaries.append(summary_file(p, root))
        except Exception as e:  # one file's failure is its own verdict
            summaries.append({"file": str(p.relative_to(root)), "scenario": None, "mode": None, "verdict": None,
                              "status": "error", "kind": "unreadable", "message": _failed(p, root, e)})
    systems: list[dict[str, Any]] = []
    for org_dir in find_orgs(root):
        org = org_dir.name
        division = org_dir.parent.name if org_dir.parent.name in DIVISIONS else "unknown"
        accel: dict[str, tuple[int | None, str, str]] = {}
        for sys_json in sorted((org_dir / "systems").glob("*.json")):
            try:
                n, model, problem = system_accelerators(sys_json)
            except Exception as e:
                n, model, problem = None, "", _failed(sys_json, root, e)
            accel[sys_json.stem] = (n, model, problem)
            systems.append({"division": division, "org": org, "system": sys_json.stem,
                            "file": str(sys_json.relative_to(root)), "accelerators": n, "accelerator_model": model,
                            "status": "error" if problem else "ok", "message": problem})
        for scen_dir in sorted(p for p in org_dir.glob("results/*/*/*") if p.is_dir() and not linked(p, org_dir)):
            try:
                results.append(_result(root, scen_dir, org, division, accel))
            except Exception as e:  # one entry's failure is its own verdict; the round goes on
                system, benchmark, folder = scen_dir.parts[-3:]
                results.append({"division": division, "org": org, "system": system, "benchmark": benchmark,
                                "scenario": scenario_name(folder) or folder, "folder": folder,
                                "file": str((scen_dir / SUMMARY_PATH).relative_to(root)), "verdict": None,
                                "metric": None, "metric_name": None, "units": None, "per_accelerator": None,
                                "accelerators": None, "status": "error", "message": _failed(scen_dir, root, e)})
    return {"root": str(root), "results": results, "systems": systems, "summaries": summaries}


def _result(root: Path, scen_dir: Path, org: str, division: str,
            accel: dict[str, tuple[int | None, str, str]]) -> dict[str, Any]:
    """The verdict of one ``results/<system>/<benchmark>/<scenario>/`` folder."""
    system, benchmark, folder = scen_dir.parts[-3:]
    scenario = scenario_name(folder) or folder
    path = scen_dir / SUMMARY_PATH
    entry: dict[str, Any] = {"division": division, "org": org, "system": system, "benchmark": benchmark,
                             "scenario": scenario, "folder": folder, "file": str(path.relative_to(root)),
                             "verdict": None,
                             "metric": None, "metric_name": None, "units": None, "per_accelerator": None}
    n, _, problem = accel.get(system, (None, "", f"no systems/{system}.json"))
    entry["accelerators"] = n
    if not path.exists() and not path.is_symlink():
        return {**entry, "status": "error", "message": "no performance/run_1/mlperf_log_summary.txt"}
    if linked(path.parent, root):
        return {**entry, "status": "error", "message": "performance/run_1 is reached through a symlink; not read"}
    try:
        s = summary.read(path)
    except summary.SummaryError as e:
        return {**entry, "status": "error", "message": str(e).removeprefix(f"{path}: ")}
    entry.update(verdict="VALID" if s.valid else "INVALID", metric=s.metric, metric_name=s.metric_name,
                 units=s.units, status="ok", message="", inferred=False)
    if scenario == "Offline" and s.scenario == "SingleStream" and "QPS w/o loadgen overhead" in s.stats:
        # Edge systems may infer Offline from a SingleStream run; the official checker then takes
        # "QPS w/o loadgen overhead" (submission-checker get_inferred_result) and so do we.
        text = s.stats["QPS w/o loadgen overhead"]
        try:
            qps = summary.number(text)
        except ValueError as e:
            return {**entry, "verdict": None, "metric": None, "status": "error",
                    "message": f"QPS w/o loadgen overhead: {e}; not a measurement"}
        entry.update(metric=qps, metric_name="QPS w/o loadgen overhead (inferred from SingleStream)",
                     units="samples/s", inferred=True)
    if s.scenario != scenario and not entry["inferred"]:
        entry.update(status="error", message=f"summary says scenario {s.scenario}, folder says {folder}")
    elif scenario == "Offline" and entry["metric"] is not None:
        if n:
            entry["per_accelerator"] = entry["metric"] / n
        else:
            entry["message"] = ("CPU only (0 accelerators): no per-accelerator value" if n == 0
                                else f"no per-accelerator value: {problem}")
    return entry


def seed_table(report: dict[str, Any], division: str = "closed") -> tuple[list[str], list[dict[str, Any]]]:
    """One row per system with an Offline result in ``division``; per-accelerator samples/s per benchmark."""
    models = {(s["org"], s["system"]): s for s in report["systems"]}
    benchmarks = sorted({r["benchmark"] for r in report["results"]
                         if r["division"] == division and r["scenario"] == "Offline"})
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in report["results"]:
        if r["division"] != division or r["scenario"] != "Offline" or r["status"] != "ok":
            continue
        desc = models.get((r["org"], r["system"]), {})
        row = rows.setdefault((r["org"], r["system"]), {
            "org": r["org"], "system": r["system"], "accelerator": desc.get("accelerator_model", ""),
            "accelerators": r["accelerators"], "values": {}})
        row["values"][r["benchmark"]] = {"per_accelerator": r["per_accelerator"], "verdict": r["verdict"]}
    return benchmarks, [rows[k] for k in sorted(rows)]


# The seed documents' benchmark order; other benchmarks of a round follow alphabetically.
SEED_ORDER = ("dlrm-99", "dlrm-99.9", "bert-99", "bert-99.9", "resnet50", "ssd-resnet34", "rnnt", "3d-unet-99",
              "3d-unet-99.9")


def seed_by_accelerator(report: dict[str, Any], division: str = "closed") -> tuple[list[str], list[dict[str, Any]]]:
    """The seed documents' layout: one row per benchmark, one column per accelerator model, the best VALID
    Offline samples/s per accelerator of any system with that accelerator (and which system it was)."""
    models = {(s["org"], s["system"]): s["accelerator_model"].strip() for s in report["systems"]}
    best: dict[str, dict[str, dict[str, Any]]] = {}
    for r in report["results"]:
        if (r["division"], r["scenario"], r["status"], r["verdict"]) != (division, "Offline", "ok", "VALID") \
                or r["per_accelerator"] is None:
            continue
        accel = models.get((r["org"], r["system"]), "") or "unknown"
        cell = best.setdefault(r["benchmark"], {}).get(accel)
        if cell is None or r["per_accelerator"] > cell["per_accelerator"]:
            best[r["benchmark"]][accel] = {"per_accelerator": r["per_accelerator"], "org": r["org"],
                                           "system": r["system"]}
    accelerators = sorted({a for cells in best.values() for a in cells})
    order = {b: i for i, b in enumerate(SEED_ORDER)}
    benchmarks = sorted(best, key=lambda b: (order.get(b, len(order)), b))
    return accelerators, [{"benchmark": b, "cells": best[b]} for b in benchmarks]


def _csv(rows: list[dict[str, Any]], fields: tuple[str, ...] | list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore")
    w.writeheader()
    for row in rows:
        # a cell a spreadsheet would read as a formula is quoted as text
        w.writerow({k: f"'{v}" if isinstance(v, str) and v[:1] in "=+-@" else v for k, v in row.items()})
    return buf.getvalue()


def write(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    benchmarks, rows = seed_table(report)
    flat = [{"org": r["org"], "system": r["system"], "accelerator": r["accelerator"],
             "accelerators": r["accelerators"],
             **{b: r["values"].get(b, {}).get("per_accelerator") for b in benchmarks}} for r in rows]
    # strict JSON: a number that is not finite has no place in it (json.dumps would write NaN or Infinity)
    atomic.write_text(out / "inference_results.json",
                      json.dumps(report, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")
    atomic.write_text(out / "inference_results.csv", _csv(report["results"], RESULT_FIELDS))
    atomic.write_text(out / "inference_table.csv",
                      _csv(flat, ["org", "system", "accelerator", "accelerators", *benchmarks]))
    accelerators, seed_rows = seed_by_accelerator(report)
    atomic.write_text(out / "inference_seed_table.csv", _csv(
        [{"benchmark": r["benchmark"], **{a: c["per_accelerator"] for a, c in r["cells"].items()}} for r in seed_rows],
        ["benchmark", *accelerators]))
    render("inference_audit.html.j2", out / "inference_report.html", report=report, benchmarks=benchmarks,
           rows=rows, counts=counts(report), accelerators=accelerators, seed_rows=seed_rows)


def counts(report: dict[str, Any]) -> dict[str, int]:
    res = report["results"]
    files = report["summaries"]
    return {"summary_files": len(files), "summary_files_read": sum(f["status"] == "ok" for f in files),
            "summary_files_unreadable": sum(f["status"] == "error" for f in files),
            "scenario_folders": len(res), "summaries_read": sum(r["verdict"] is not None for r in res),
            "valid": sum(r["verdict"] == "VALID" for r in res), "invalid": sum(r["verdict"] == "INVALID" for r in res),
            "errors": sum(r["status"] == "error" for r in res),
            "closed_offline_per_accelerator": sum(r["per_accelerator"] is not None and r["division"] == "closed"
                                                  for r in res),
            "systems": len(report["systems"]), "system_errors": sum(s["status"] == "error" for s in report["systems"])}


def job(job: Job) -> None:
    """rules/inference_audit.smk: params root (the round, or a division or organisation of it) and out (the audit's
    folder, which the rule file has checked lies outside it)."""
    start = time.perf_counter()
    report = audit(Path(job.params["root"]))
    report["counts"] = counts(report)
    report["seconds"] = round(time.perf_counter() - start, 3)
    write(report, Path(job.params["out"]))
    print(json.dumps(report["counts"]))
