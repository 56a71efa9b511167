"""The inference report: the seed documents' table (benchmark x scenario: samples per second for
Offline and Server, the early-stopping latency estimate for SingleStream and MultiStream, as the declared
round's official checker reports them (mlrepro/inference/check.py ``headline``), per accelerator where the
system has accelerators), the LoadGen settings each performance run stated (measured
on the machine, or from the user's user.conf), LoadGen's latency percentiles as a plot per model (a line per
scenario), and NVML energy per sample where a GPU was sampled.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.job import Job
from mlrepro.inference.summary import SCENARIOS
from mlrepro.report.render import render
from mlrepro.report.svg import line_chart

_PERCENTILE = re.compile(r"^(\d+(?:\.\d+)?) percentile latency \(ns\)$")


def accelerators(system_json: Path) -> int:
    """accelerators_per_node x number_of_nodes (strings in published JSONs); 0 for CPU-only systems."""
    from mlrepro.inference.audit import system_accelerators  # finite, whole, in range; bounded reads

    n, _, problem = system_accelerators(system_json)
    if n is None:
        raise ValueError(f"{system_json}: {problem}")
    return n


def cell(result: dict[str, Any], n_acc: int) -> dict[str, Any]:
    """One table cell: the metric in the unit the seed documents use, and per accelerator."""
    value, units = result.get("metric"), result.get("units")
    if value is None:
        return {"text": "—", "per_acc": "—"}
    if units == "ns":
        ms = value / 1e6
        return {"value": ms, "unit": "ms", "name": result.get("metric_name"),
                "text": f"{ms:.3f} ms ({result.get('metric_name')})", "per_acc": "—"}
    per = f"{value / n_acc:,.1f}" if n_acc else "— (CPU only)"
    return {"value": value, "unit": "samples/s", "name": result.get("metric_name"), "text": f"{value:,.1f} samples/s",
            "per_acc": per}


def latency_points(stats: dict[str, str]) -> list[tuple[float, float]]:
    """(percentile, latency in ms) from a summary's "N percentile latency (ns)" lines."""
    return sorted((float(m.group(1)), float(v) / 1e6) for k, v in stats.items()
                  if (m := _PERCENTILE.match(k)) and v.strip().replace(".", "", 1).isdigit())


def latency_plots(results: list[dict[str, Any]]) -> list[Any]:
    """One chart per model, a line per latency-bound scenario (Offline's one query has a duration, not a
    latency worth a percentile)."""
    by_model: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for r in results:
        if r["scenario"] != "Offline":
            by_model.setdefault(r["benchmark"], {})[r["scenario"]] = latency_points(r.get("stats", {}))
    return [line_chart({s: series[s] for s in SCENARIOS if s in series},
                       title=f"{model}: LoadGen latency percentiles", x_label="percentile", y_label="latency (ms)")
            for model, series in by_model.items()]


def measured_text(measured: dict[str, Any]) -> str:
    """What a calibration measured, in a line (mlrepro/inference/calibrate.py names the fields)."""
    if "highest_rate_within_bound" in measured:
        return (f"{measured['highest_rate_within_bound']:,.1f} queries/s keep p{measured['percentile'] * 100:g} within "
                f"{measured['bound_ms']:g} ms ({len(measured.get('tries', []))} LoadGen tries from a simulated "
                f"{measured['simulated_rate']:,.1f})")
    if "samples_per_second" in measured:
        return f"{measured['samples_per_second']:,.1f} samples/s over {measured['samples']} samples"
    if "mean_latency_ms" in measured:
        return (f"mean {measured['mean_latency_ms']:.3f} ms, p90 {measured['p90_latency_ms']:.3f} ms over "
                f"{measured['queries']} queries")
    return "— (stated in the user.conf)"


def build(check: dict[str, Any], runs_dir: Path) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    energy, stated = [], []
    n_acc = 0
    for r in check["results"]:
        pkg_sys = Path(check.get("package", "")) / r["division"] / r["org"] / "systems" / f"{r['system']}.json"
        n_acc = accelerators(pkg_sys) if pkg_sys.is_file() else 0
        row = rows.setdefault(r["benchmark"], {})
        row[r["scenario"]] = {**cell(r, n_acc), "valid": r["valid"], "submittable": r["submittable"],
                              "accuracy": r["accuracy"]}
    for perf in sorted(runs_dir.glob("*/*/performance/result.json")):
        rec = json.loads(perf.read_text())
        if (cal := rec.get("calibration")) is not None:
            stated.append({"benchmark": rec["benchmark"], "scenario": rec["scenario"], "key": cal["key"],
                           "value": cal["value"], "unit": cal["unit"], "source": cal["source"],
                           "headroom": cal["headroom"], "measured": measured_text(cal["measured"]),
                           "seconds": cal["seconds"]})
        if rec.get("energy_per_sample_j") is not None:
            energy.append({"benchmark": rec["benchmark"], "scenario": rec["scenario"],
                           "joules_per_sample": rec["energy_per_sample_j"],
                           "energy_j": rec["telemetry"]["accelerator_energy_j"]})
    stated.sort(key=lambda c: (c["benchmark"], SCENARIOS.index(c["scenario"])))
    return {"rows": rows, "plots": latency_plots(check["results"]), "energy": energy, "stated": stated,
            "accelerators": n_acc}


def table_csv(table: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["benchmark", "scenario", "metric", "unit", "metric_name", "per_accelerator", "valid", "submittable",
                "accuracy", "accuracy_target"])
    for bench, row in table["rows"].items():
        for scen in SCENARIOS:
            if scen in row:
                c = row[scen]
                w.writerow([bench, scen, c.get("value", ""), c.get("unit", ""), c.get("name", ""), c["per_acc"],
                            c["valid"], c["submittable"], c["accuracy"].get("value", ""),
                            c["accuracy"].get("target", "")])
    return buf.getvalue()


def job(job: Job) -> None:
    """rules/inference.smk inference_report: input check (the package check's findings); params runs_dir; output
    html and table (CSV)."""
    check = json.loads(job.input["check"].read_text())
    check.setdefault("package", str(job.input["check"].parent / "package"))
    table = build(check, Path(job.params["runs_dir"]))
    atomic.write_text(job.output["table"], table_csv(table))
    render("inference.html.j2", job.output["html"], check=check, table=table, scenarios=SCENARIOS)
