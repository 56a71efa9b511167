"""The inference rules' checks on the package this pipeline produces, by the declared round's rules
(mlrepro/inference/rounds.py).

The official checker (mlcommons/inference tools/submission) is not shipped by any package on PyPI (the
mlcommons-loadgen wheel holds only the LoadGen extension; mlc-scripts fetches the inference repository at run
time, which CI cannot reach). So this module implements, named as ours, the checks the rules define for what
we produce, each reported per file:

- systems/<sys>.json: every field the round requires, non-empty; submitter and division match the folders
- results/.../performance/run_1: summary and detail present; scenario and mode as the folder says;
  LoadGen's own verdict "Result is : VALID" with every "... satisfied" line Yes; no error in the detail log;
  the round's seeds. The headline result is the one the round's checker reports (early-stopping estimates
  for SingleStream and MultiStream, Server's scheduled (v2.0) or completed (v6.1) samples per second)
- results/.../accuracy: accuracy.txt with the model's line as its accuracy script prints it (the metric the
  official checker reads), ours with reference and target, and a hash= line (the sha256 of the full log as
  LoadGen wrote it), the accuracy log within 10 KiB, the quality target met
- measurements (measurements/... up to v5.1, the results scenario folder from v6.0): the JSON fields the
  checker requires, user.conf and README.md (and mlperf.conf up to v5.1)
- submittable: the round's minimum duration, query and sample counts and performance sample count, the
  accuracy run over the round's whole dataset, every scenario the system type requires. A shortened run is a
  valid LoadGen run but not submittable: those findings are its expected errors (``expected_errors``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mlrepro.core import atomic, safe_read
from mlrepro.core.job import Job
from mlrepro.inference import rounds, summary
from mlrepro.inference.package import ACCURACY_LOG_LIMIT

SYSTEM_FIELDS = (
    "division", "submitter", "status", "system_name", "system_type", "number_of_nodes",
    "host_processor_model_name", "host_processor_frequency", "host_processor_caches",
    "host_processor_interconnect", "host_processor_core_count", "host_processors_per_node",
    "host_memory_capacity", "host_memory_configuration", "host_storage_capacity", "host_storage_type",
    "host_networking", "host_networking_topology", "accelerators_per_node", "accelerator_model_name",
    "accelerator_frequency", "accelerator_host_interconnect", "accelerator_interconnect",
    "accelerator_interconnect_topology", "accelerator_memory_capacity", "accelerator_memory_configuration",
    "accelerator_on-chip_memories", "framework", "operating_system", "other_software_stack", "cooling",
    "hw_notes", "sw_notes",
)
OPTIONAL_EMPTY = {"hw_notes", "sw_notes"}
MEASUREMENT_FIELDS = ("input_data_types", "retraining", "starting_weights_filename", "weight_data_types",
                      "weight_transformations")


class Findings:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.items: list[dict[str, Any]] = []

    def add(self, path: Path, check: str, ok: bool, message: str = "", severity: str = "error") -> bool:
        """``severity`` of a failure: "error" (the package is broken), "invalid" (LoadGen's verdict),
        "not_submittable" (valid under shortened settings) or "note" (allowed, reported)."""
        self.items.append({"file": str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path),
                           "check": check, "ok": bool(ok), "message": message, "severity": severity})
        return ok


def _system(f: Findings, path: Path, org: str, division: str, rnd: rounds.Round) -> dict[str, Any]:
    try:
        desc = safe_read.read_json(path)
    except safe_read.UnsafeInput as e:
        f.add(path, "system description", False, f"unreadable: {str(e).removeprefix(f'{path}: ')}")
        return {}
    missing = [k for k in (*SYSTEM_FIELDS, *rnd.system_fields)
               if k not in desc or (str(desc[k]).strip() == "" and k not in OPTIONAL_EMPTY)]
    f.add(path, "system fields", not missing, "missing or empty: " + ", ".join(missing) if missing else "")
    f.add(path, "submitter and division match folders",
          desc.get("submitter") == org and desc.get("division") == division,
          f"submitter {desc.get('submitter')!r}, division {desc.get('division')!r}")
    f.add(path, "status", desc.get("status") in ("available", "preview", "rdi"), str(desc.get("status")))
    f.add(path, "system type", desc.get("system_type") in ("datacenter", "edge", "datacenter,edge", "edge,datacenter"),
          str(desc.get("system_type")))
    return desc


# The detail-log key of each scenario's result as the round's checker reports it (Server: the round's own).
HEADLINE = {"SingleStream": ("early_stopping_latency_ss", "ns", "early-stopping p90 latency"),
            "MultiStream": ("early_stopping_latency_ms", "ns", "early-stopping p99 latency"),
            "Offline": ("result_samples_per_second", "samples/s", "samples per second")}


def headline(scenario: str, detail: dict[str, Any], rnd: rounds.Round) -> tuple[float | None, str, str]:
    """The result the round's official checker reports: (value, units, name)."""
    key, units, name = HEADLINE.get(scenario, (rnd.server_result, "samples/s",
                                               rnd.server_result.removeprefix("result_").replace("_", " ")))
    value = detail.get(key)
    if value is None:
        return None, units, f"{name} ({key})"
    try:  # finite and in range, as the audit holds a summary's numbers
        return summary.number(str(value)), units, f"{name} ({key})"
    except ValueError:
        return None, units, f"{name} ({key}: {str(value)[:40]!r}, not a measurement)"


def _performance(f: Findings, scen_dir: Path, scenario: str, rnd: rounds.Round, benchmark: str) -> dict[str, Any]:
    run = scen_dir / "performance" / "run_1"
    out: dict[str, Any] = {"scenario": scenario, "valid": False, "submittable": False}
    s_path, d_path = run / "mlperf_log_summary.txt", run / "mlperf_log_detail.txt"
    if not f.add(run, "performance files", s_path.is_file() and d_path.is_file(), "summary and detail needed"):
        return out
    try:
        s = summary.read(s_path)
    except summary.SummaryError as e:
        f.add(s_path, "summary readable", False, str(e))
        return out
    f.add(s_path, "scenario matches folder", s.scenario == scenario, f"summary says {s.scenario}")
    f.add(s_path, "performance mode", s.mode == "PerformanceOnly", s.mode)
    unmet = [k for k, v in s.constraints.items() if not v]
    verdict = f"Result is : {'VALID' if s.valid else 'INVALID'}"
    f.add(s_path, "LoadGen verdict", bool(s.valid) and not unmet,
          verdict + (f"; not satisfied: {', '.join(unmet)}" if unmet else ""), severity="invalid")
    d = summary.detail(d_path)
    f.add(d_path, "no LoadGen errors", not d["__errors__"], "; ".join(d["__errors__"])[:500])
    seeds = {k: int(d.get(f"effective_{k}") or 0) for k in rounds.SEED_KEYS}
    wrong = [f"{k} {seeds[k]} (expected {v})" for k, v in rnd.seeds().items() if seeds[k] != v]
    f.add(d_path, f"the {rnd.name} seeds", not wrong, "; ".join(wrong))
    # what the round requires against what LoadGen ran with (Offline is one query: its minimum counts samples)
    count_key = "effective_min_sample_count" if scenario == "Offline" else "effective_min_query_count"
    ran = {"min_duration": int(d.get("effective_min_duration_ms") or 0), "min_query_count": int(d.get(count_key) or 0),
           "performance_sample_count": int(d.get("effective_performance_sample_count") or 0)}
    need = {"min_duration": rnd.int_value(benchmark, scenario, "min_duration"),
            "min_query_count": rnd.int_value(benchmark, scenario, "min_query_count"),
            # 0 in the conf (3d-unet): the whole dataset
            "performance_sample_count": (rnd.int_value(benchmark, scenario, "performance_sample_count_override")
                                         or rnd.dataset_size.get(rnd.model(benchmark), 0))}
    below = [f"{k} {ran[k]} below the {rnd.name} minimum {need[k]}" for k in ran if ran[k] < need[k]]
    metric, units, name = headline(scenario, d, rnd)
    out.update(valid=bool(s.valid) and not unmet and not d["__errors__"] and s.scenario == scenario,
               submittable=not below and not wrong, min_duration_ms=ran["min_duration"],
               min_query_count=ran["min_query_count"], performance_sample_count=ran["performance_sample_count"],
               metric=metric, metric_name=name, units=units, stats=s.stats)
    for message in below:
        f.add(d_path, "official minimums (submittable)", False, f"{message}: shortened settings, not submittable",
              severity="not_submittable")
    return out


def _accuracy(f: Findings, scen_dir: Path, rnd: rounds.Round, model: str, benchmark: str) -> dict[str, Any]:
    acc = scen_dir / "accuracy"
    txt, log = acc / "accuracy.txt", acc / "mlperf_log_accuracy.json"
    if not f.add(acc, "accuracy files", txt.is_file() and log.is_file(), "accuracy.txt and mlperf_log_accuracy.json"):
        return {"met": False}
    covered = int(summary.detail(acc / "mlperf_log_detail.txt").get("qsl_reported_total_count") or 0) \
        if (acc / "mlperf_log_detail.txt").is_file() else 0
    size = rnd.dataset_size.get(model)
    f.add(acc, "accuracy over the whole dataset (submittable)", size is not None and covered >= size,
          f"accuracy over {covered} samples; the {rnd.name} dataset has "
          + (f"{size}" if size is not None else "a size mlrepro does not know") + ": not submittable",
          severity="not_submittable")
    text = txt.read_text(errors="replace")
    kind = rounds.ACCURACY_KIND[benchmark]
    official = re.search(rounds.ACCURACY_LINES[kind], text, re.M)
    ours = re.search(r"^mlrepro: .*value=([-0-9.]+), reference=([-0-9.]+), target=([-0-9.]+)", text, re.M)
    h = re.search(r"^hash=([0-9a-f]{64})$", text, re.M)
    f.add(txt, "hash line", h is not None, "a hash=<sha256> line of the full accuracy log")
    f.add(log, "accuracy log size", log.stat().st_size <= ACCURACY_LOG_LIMIT + 16, f"{log.stat().st_size} bytes")
    if ours is None:
        f.add(txt, "accuracy target", False, "no 'mlrepro: ... value=, reference=, target=' line")
        return {"met": False}
    value, reference, target = (float(g) for g in ours.groups())
    # the line the official checker reads states the same value, within the digits it is printed with
    f.add(txt, f"the {kind} line of the model's accuracy script",
          official is not None and abs(float(official.group(1)) - value) < 1e-3 * max(1.0, abs(value)),
          f"expected a line matching {rounds.ACCURACY_LINES[kind]} with {value:.4f}")
    met = f.add(txt, "accuracy target", value >= target, f"{value:.4f} vs target {target:.4f}")
    return {"met": met, "value": value, "reference": reference, "target": target}


def _scenarios_by_result(results: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], set[str]]:
    by: dict[tuple[str, str, str, str], set[str]] = {}
    for r in results:
        by.setdefault((r["division"], r["org"], r["system"], r["benchmark"]), set()).add(r["scenario"])
    return by


def _measurements(f: Findings, meas: Path, mj: Path, rnd: rounds.Round) -> None:
    try:
        missing = [k for k in MEASUREMENT_FIELDS if k not in json.loads(mj.read_text())]
        f.add(mj, "measurements fields", not missing, ", ".join(missing))
    except (OSError, json.JSONDecodeError) as e:
        f.add(mj, "measurements fields", False, f"unreadable: {e}")
    names = ("user.conf", "README.md") + (() if rnd.results_hold_measurements else ("mlperf.conf",))
    f.add(meas, " and ".join(names), all((meas / name).is_file() for name in names))


def check(package: Path, round_name: str = rounds.DEFAULT) -> dict[str, Any]:
    rnd = rounds.get(round_name)
    benchmarks = {model: bench for bench, model in rnd.models.items()}
    f = Findings(package)
    results = []
    system_types: dict[tuple[str, str, str], str] = {}
    for org_dir in sorted(p for p in package.glob("*/*") if p.is_dir()):
        division, org = org_dir.parent.name, org_dir.name
        for sys_json in sorted((org_dir / "systems").glob("*.json")):
            desc = _system(f, sys_json, org, division, rnd)
            system_types[(division, org, sys_json.stem)] = str(desc.get("system_type", ""))
        for scen_dir in sorted(p for p in org_dir.glob("results/*/*/*") if p.is_dir()):
            system, model, scenario = scen_dir.parts[-3:]
            if not f.add(scen_dir, f"a {rnd.name} model", model in benchmarks,
                         f"{model} is not a model of {rnd.name} (it has {', '.join(sorted(benchmarks))})"):
                continue
            perf = _performance(f, scen_dir, scenario, rnd, benchmarks[model])
            accuracy = _accuracy(f, scen_dir, rnd, model, benchmarks[model])
            if rnd.results_hold_measurements:
                _measurements(f, scen_dir, scen_dir / "measurements.json", rnd)
            else:
                meas = org_dir / "measurements" / system / model / scenario
                _measurements(f, meas, meas / f"{system}_{scenario}.json", rnd)
            code = org_dir / rnd.code_dir / model
            f.add(code, f"{rnd.code_dir}/ of the model", code.is_dir())
            results.append({"division": division, "org": org, "system": system, "benchmark": model,
                            **perf, "accuracy": accuracy,
                            "passed": perf["valid"] and accuracy["met"]})
    for (division, org, system, model), scenarios in _scenarios_by_result(results).items():
        kind = system_types.get((division, org, system), "")
        required = rnd.required_scenarios(kind, model)
        missing = [s for s in (required or ()) if s not in scenarios]
        ok = required is not None and not missing
        # the open division may submit any scenarios (the checkers ignore missing ones there): a note
        closed = division == "closed"
        f.add(package / division / org / "results" / system / model, f"scenarios a {kind} system must submit", ok,
              "" if ok else f"{model} has no {kind} category at {rnd.name}" if required is None
              else f"missing {', '.join(missing)}" + (": not submittable" if closed else " (open division: allowed)"),
              severity="not_submittable" if closed or required is None else "note")
    not_submittable = [i for i in f.items if not i["ok"] and i["severity"] == "not_submittable"]
    for r in results:  # a finding under a result's folder (or its model's) makes it not submittable
        folder = f"{r['division']}/{r['org']}/results/{r['system']}/{r['benchmark']}"
        if any(i["file"] in (folder, f"{folder}/{r['scenario']}") or i["file"].startswith(f"{folder}/{r['scenario']}/")
               for i in not_submittable):
            r["submittable"] = False
    errors = [i for i in f.items if not i["ok"] and i["severity"] == "error"]
    invalid = [r for r in results if not r["valid"]]
    shortened = any(i["check"] == "official minimums (submittable)" for i in not_submittable)
    return {"checker": f"mlrepro.inference.check, by the {rnd.name} rules (ours: the official checker is not on PyPI)",
            "round": rnd.name, "package": str(package),
            "intact": not errors and bool(results), "all_valid": not invalid, "shortened": shortened,
            # the gate: an intact package whose runs LoadGen judged VALID; shortened runs are judged on a
            # shared machine, so their INVALID verdicts are reported but do not stop the pipeline
            "passed": not errors and bool(results) and (not invalid or shortened),
            "submittable": not errors and bool(results) and not invalid and all(r["submittable"] for r in results),
            # what keeps a valid package from submission: a shortened run's expected errors
            "expected_errors": [f"{i['file']}: {i['message']}" for i in not_submittable],
            "results": results, "findings": f.items}


def job(job: Job) -> None:
    """rules/inference.smk inference_check: input the package; params round. The findings are written either way;
    the job fails where a check that gates fails."""
    out = job.output.first
    report = check(job.input.first, job.params["round"])
    atomic.write_text(out, json.dumps(report, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")
    if not report["passed"]:
        bad = [f"  {i['file']}: {i['check']}: {i['message']}" for i in report["findings"]
               if not i["ok"] and i["severity"] not in ("not_submittable", "note")]
        raise SystemExit("error: the inference package fails its checks:\n" + "\n".join(bad[:40])
                         + f"\n(all findings in {out})")
