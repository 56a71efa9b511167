"""The submission report: everything a submitter or reviewer needs on one offline HTML page."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from markupsafe import Markup

from mlrepro import PROJECT_ROOT
from mlrepro.core import integrity, rulesets
from mlrepro.core.job import Job
from mlrepro.core.outputs import Outputs
from mlrepro.datasets import manifest
from mlrepro.report import svg
from mlrepro.report.render import render
from mlrepro.report.telemetry import telemetry_charts, warnings


def git_commit() -> str:
    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, check=False)
        return out.stdout.strip() if out.returncode == 0 else ""

    commit = git("rev-parse", "HEAD") or "unknown (not a git checkout)"
    return commit + (" (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else "")


def _metric_points(metrics: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """metric name -> (epoch, value); a dict metric (maskrcnn) gives one curve per key."""
    curves: dict[str, list[tuple[float, float]]] = {}
    for m in metrics:
        values = m["value"] if isinstance(m["value"], dict) else {"": m["value"]}
        for key, value in values.items():
            curves.setdefault(key, []).append((m["epoch"], value))
    return curves


def convergence_charts(benchmark: str, runs: list[dict[str, Any]], target: Any) -> list[Markup]:
    per_key: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for run in runs:
        for key, points in _metric_points(run.get("metrics", [])).items():
            per_key.setdefault(key, {})[f"run {run['index']} (seed {run['seed']})"] = points
    charts = []
    for key, series in per_key.items():
        goal = target.get(key) if isinstance(target, dict) else target
        label = f"eval_accuracy {key}".strip()
        charts.append(svg.line_chart(series, title=f"{benchmark}: {label} per epoch", x_label="epoch",
                                     y_label=label, hlines=[(goal, f"target {goal}")] if goal is not None else []))
    return charts


def _timings(info: Path) -> list[dict[str, Any]]:
    rows = []
    for tsv in sorted((info / "benchmarks").glob("*.tsv")):
        with tsv.open() as f:
            for row in csv.DictReader(f, delimiter="\t"):
                rows.append({"job": tsv.stem, "seconds": float(row["s"]), "max_rss_mb": row.get("max_rss", "-")})
    return rows


def seed_columns(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The seed's first table for our own results, per benchmark: minutes at scale (the fastest multi-node
    system) and per accelerator (the single-node system with the fewest minutes x accelerators)."""
    rows = []
    for name in dict.fromkeys(r["benchmark"] for r in summary):
        valid = [r for r in summary if r["benchmark"] == name and r["minutes"] is not None]
        scale = min((r for r in valid if r["nodes"] > 1), key=lambda r: r["minutes"], default=None)
        single = [r for r in valid if r["nodes"] == 1]
        per_acc = min(single, key=lambda r: (r["accelerator_minutes"] is None, r["accelerator_minutes"] or 0,
                                             r["minutes"]), default=None)
        rows.append({"benchmark": name, "title": rulesets.TITLES.get(name, name),
                     "at_scale": scale, "per_accelerator": per_acc})
    return rows


def _section(out: Outputs, system: str, name: str, bench: dict[str, Any], implementation: dict[str, Any],
             score: dict[str, Any]) -> dict[str, Any]:
    runs = []
    selection = score.get("selection")  # runs_to_run > runs: the median window of the launched runs is packaged
    chosen = set(selection["chosen_keys"]) if selection else None
    for i in range(bench.get("runs_to_run", bench["runs"])):
        run_dir = out.run_dir(system, name, i)
        run = json.loads(out.summary(system, name, i).read_text())
        verdict = json.loads(out.verdict(system, name, i).read_text())
        runs.append({**run, "index": i, "compliance": verdict,
                     "packaged": chosen is None or str(out.result(system, name, i)) in chosen,
                     "telemetry_charts": telemetry_charts(run_dir, run),
                     "telemetry_warnings": warnings(run.get("telemetry")),
                     "energy_j": (run.get("telemetry") or {}).get("accelerator_energy_j")})
    on_slurm = [r for r in runs if r.get("slurm")]
    if on_slurm:  # Slurm's own word on each run's job
        from mlrepro.slurm.jobs import slurm_states

        slurm_states(r["slurm"] for r in on_slurm)
    manifest_file = out.generated_data(name) / manifest.MANIFEST
    scored = [r["energy_j"] for r in runs if r["status"] == "success" and r["packaged"]]
    warned: dict[str, list[int]] = {}
    for r in runs:
        for w in r["telemetry_warnings"]:
            warned.setdefault(w, []).append(r["index"])
    return {
        "telemetry_warnings": warned, "slurm": bool(on_slurm),
        "energy_per_run_j": sum(scored) / len(scored) if scored and None not in scored else None,
        "anchor": f"bm-{system}-{name}", "system": system,
        "name": name, "title": rulesets.TITLES.get(name, name), "score": score, "runs": runs,
        "selection": selection,
        "target": bench["params"].get("target"), "params": bench["params"], "implementation": implementation,
        "charts": convergence_charts(name, runs, bench["params"].get("target")),
        "manifest": manifest.read_manifest(manifest_file.parent) if manifest_file.exists() else {},
    }


def build_context(out: Outputs, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec``: the pipeline's report spec (config, config_hash, submittable, benchmarks, systems)."""
    config, config_hash, systems = spec["config"], spec["config_hash"], spec["systems"]
    benchmarks, submittable = spec["benchmarks"], bool(spec["submittable"])
    scores = json.loads(out.scores.read_text())
    package = json.loads(out.package_verdict.read_text())
    env = json.loads(out.environment.read_text())
    descs = {s: json.loads(out.system_desc(config["org"], s).read_text()) for s in systems}
    order = sorted(benchmarks, key=lambda b: rulesets.SEED_ORDER.index(b) if b in rulesets.SEED_ORDER else 99)
    # the mlperf-logging releases whose compliance checker judged the results (one, unless the config changed)
    gate_judges = sorted({json.loads(out.verdict(s, b, i).read_text()).get("judged_by") or "(not recorded)"
                          for s, sys_spec in systems.items() for b in sys_spec["implementations"]
                          for i in range(benchmarks[b]["runs"]) if out.verdict(s, b, i).exists()})
    sections, summary = [], []
    for system, sys_spec in systems.items():
        desc = descs[system]
        nodes = int(desc["number_of_nodes"])
        accelerators = nodes * int(desc["accelerators_per_node"])
        for name in (b for b in order if b in sys_spec["implementations"]):
            bench = benchmarks[name]
            score = scores[system][name]
            minutes = score["minutes"]
            status = "valid" if minutes is not None else f"invalid: {score['reason']}"
            if not submittable:
                status += " (not submittable: fewer runs than the ruleset requires)"
            summary.append({
                "system": system, "nodes": nodes, "anchor": f"bm-{system}-{name}",
                "benchmark": name, "title": rulesets.TITLES.get(name, name), "minutes": minutes,
                "accelerators": accelerators,
                "accelerator_minutes": minutes * accelerators if minutes is not None and accelerators else None,
                "status": status, "valid": minutes is not None and submittable,
                "runs": bench["runs"], "required_runs": bench["required_runs"],
            })
            sections.append(_section(out, system, name, bench, sys_spec["implementations"][name], score))
    return {
        "system": ", ".join(systems), "systems": descs, "org": config["org"], "division": config["division"],
        "ruleset": config["ruleset"], "usage": config["usage"], "engine": config["engine"],
        "submittable": submittable, "summary": summary, "seed_table": seed_columns(summary), "sections": sections,
        "package": package, "gate_judges": gate_judges, "environment": env, "config": config,
        "config_hash": config_hash,
        "commit": git_commit(), "timings": _timings(out.info), "cpu_only": all(r["accelerators"] == 0 for r in summary),
    }


def job(job: Job) -> None:
    """rules/report.smk: params outdir and spec (config, config_hash, submittable, benchmarks, systems: the plan's
    report spec)."""
    out, spec = Outputs(Path(job.params["outdir"])), job.params["spec"]
    # The report shows what run.json and the package say: only when they still match their files.
    problems = [p for system, sys_spec in spec["systems"].items() for name in sys_spec["implementations"]
                for i in range(spec["benchmarks"][name]["runs"])
                if (p := integrity.result_problem(out.result(system, name, i)))]
    recorded = json.loads(out.package_verdict.read_text()).get("files")
    if recorded is not None:
        problems += integrity.tree_problems(out.submission, recorded)
    if problems:
        sys.exit("error: the report's inputs changed after they were written:\n"
                 + "\n".join(f"  {p}" for p in problems) + "\nRun the pipeline again: it names what to do.")
    render("submission.html.j2", job.output.first, **build_context(out, spec),
           vendor_rows=vendor_rows(job.input.many("vendor")))


def vendor_rows(paths: list[Path]) -> list[dict[str, Any]] | None:
    """inference.vendor's performance runs as vendor_report wrote them (<outdir>/inference_vendor/report.json), for
    the same table as its page (report_templates/inference_vendor_runs.html.j2); None without inference.vendor."""
    if not paths:
        return None
    return [row for path in paths for row in json.loads(path.read_text())["rows"]]
