"""The comparison of the reproduced runs with the submission: statistics, RCP and a verdict.

The verdict per benchmark, and the rules behind it:

- *not reproduced*: a logged hyperparameter differs (named; this decides first).
- *not reproduced*: a reproduced run's log cannot be trusted: its logged run_start or run_stop lies outside the time
  its code ran by the run driver's clock (run.json ``wall``), or it logs more training than that time (the logged
  times are the package code's own; these bounds are ours).
- *not comparable*: no reproduced run converged, or a reproduced log fails the compliance gate.
- *not reproduced*: the epochs to converge differ by more
  than the tolerance (two standard errors of the difference of the means, at least half an epoch; the
  RCP rule's question, "does the submission converge faster than the implementation does?", asked
  of the reproduction instead of the reference runs); or the numeric verdict (numeric.py) finds, where
  the hardware class matches (the accelerators each reproduced run used, as the run driver recorded them from NVML:
  count per node, model and memory, against the system description) and each side has 3 converged runs, the whole
  95% bootstrap interval of the
  time-to-train ratio outside the tolerance (reproduce_tolerance; default +/-2.5% imaging, +/-5% others),
  or the reproduced runs converging faster than the RCP of the batch size allows. Mann-Whitney U on the
  times (two-sided) is reported beside it.
- *reproduced*: otherwise. With the same seeds on a deterministic CPU implementation the eval metrics
  are bit-identical; the report says per run whether they are.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any

from mlrepro.core import safe_read
from mlrepro.core.hashing import sha256_file
from mlrepro.core.outputs import Outputs
from mlrepro.datasets.manifest import MANIFEST as DATA_MANIFEST
from mlrepro.package.provenance import MANIFEST
from mlrepro.reproduce import numeric
from mlrepro.reproduce.errors import ReproduceError
from mlrepro.reproduce.plan import BenchmarkPlan, Plan
from mlrepro.reproduce.results import LoggedRun, read_log

ALPHA = 0.05
TIME_TOLERANCE = 0.10  # relative median difference that, with a significant test, fails a reproduction
METHOD = __doc__.split("The verdict per benchmark, and the rules behind it:")[1].strip()


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def olympic(benchmark: str, minutes: list[float | None]) -> float | None:
    from mlrepro.score import olympic_mean

    return olympic_mean(benchmark, minutes).minutes


def time_test(submitted: list[float], reproduced: list[float]) -> dict[str, Any]:
    """Mann-Whitney U, two-sided, on times to train: no normality assumed; runs assumed independent."""
    from scipy.stats import mannwhitneyu

    n1, n2 = len(submitted), len(reproduced)
    out: dict[str, Any] = {"test": "Mann-Whitney U, two-sided", "alpha": ALPHA, "n_submitted": n1,
                           "n_reproduced": n2, "p": None, "min_attainable_p": None, "significant": False,
                           "median_submitted": statistics.median(submitted) if submitted else None,
                           "median_reproduced": statistics.median(reproduced) if reproduced else None}
    if not n1 or not n2:
        out["note"] = "no converged runs on one side"
        return out
    out["min_attainable_p"] = 2 / math.comb(n1 + n2, n2)
    result = mannwhitneyu(submitted, reproduced, alternative="two-sided", method="exact")
    out["p"] = float(result.pvalue)
    out["u"] = float(result.statistic)
    rel = abs(out["median_reproduced"] - out["median_submitted"]) / out["median_submitted"]
    out["relative_median_difference"] = rel
    out["significant"] = out["p"] < ALPHA and rel > TIME_TOLERANCE
    if out["min_attainable_p"] >= ALPHA:
        out["note"] = (f"with {n1} and {n2} runs the smallest attainable p is {out['min_attainable_p']:.3f} "
                       f">= {ALPHA}: the test cannot find a difference; times are compared descriptively")
    return out


def convergence_test(submitted: list[float], reproduced: list[float]) -> dict[str, Any]:
    """Mean epochs to converge of the same seeds; tolerance: 2 standard errors of the difference, >= 0.5."""
    out: dict[str, Any] = {"rule": "|mean submitted - mean reproduced| <= max(2 SE of the difference, 0.5 epoch)",
                           "mean_submitted": _mean(submitted), "mean_reproduced": _mean(reproduced),
                           "passed": None}
    if not submitted or not reproduced:
        return out
    se = 0.0
    for sample in (submitted, reproduced):
        if len(sample) > 1:
            se += statistics.variance(sample) / len(sample)
    out["tolerance"] = max(2 * math.sqrt(se), 0.5)
    out["difference"] = out["mean_submitted"] - out["mean_reproduced"]
    out["passed"] = abs(out["difference"]) <= out["tolerance"]
    return out


def _rcp(benchmark: str, division: str, ruleset: str, bs: Any, epochs: list[float]) -> dict[str, Any]:
    from mlrepro.audit import rcp

    if not rcp.applies(ruleset, division, benchmark):
        return {"applies": False, "message": f"the RCP rule applies to the closed division only (this is {division})"}
    try:
        passed, message, _ = rcp._decide(rcp._reference("training", ruleset, benchmark), bs, epochs)
    except Exception as e:  # no RCP for this benchmark or batch size in the official data
        return {"applies": True, "passed": None, "message": f"{type(e).__name__}: {e}"}
    return {"applies": True, "passed": passed, "message": message}


def _hyperparameter_diffs(submitted: LoggedRun, reproduced: LoggedRun) -> list[dict[str, Any]]:
    keys = sorted(submitted.hyperparameters.keys() | reproduced.hyperparameters.keys())
    return [{"key": k, "submitted": submitted.hyperparameters.get(k, "(not logged)"),
             "reproduced": reproduced.hyperparameters.get(k, "(not logged)")}
            for k in keys if submitted.hyperparameters.get(k, "(not logged)")
            != reproduced.hyperparameters.get(k, "(not logged)")]


def _our_json(path: Path) -> dict[str, Any]:
    """A file this pipeline wrote for a reproduced run (its compliance verdict, run.json); {} when absent."""
    if not path.is_file():
        return {}
    doc = safe_read.read_json(path)
    return doc if isinstance(doc, dict) else {}


# A reproduced run's logged window must lie within its launch by our clock, as the audit's rule for a package's runs
# (mlrepro/audit/manifest.py); the slack covers the clocks' rounding (the driver's ms, a container's same clock).
LAUNCH_SLACK_MS = 2000


def clock_check(rep: LoggedRun, wall: Any) -> dict[str, Any]:
    """A reproduced run's logged times against the run driver's clock (run.json ``wall``: when its code ran): the
    logged run_start and run_stop inside that window and the time to train no longer than it. What the log says is
    self-reported by the package's code; these bounds are ours. ``problems`` says why the log cannot be trusted."""
    out: dict[str, Any] = {"wall_seconds": None, "logged_seconds": None, "problems": []}
    if not isinstance(wall, dict) or not all(isinstance(wall.get(k), int | float) for k in ("start_ms", "stop_ms")):
        out["problems"].append("the run driver recorded no launch window (run.json wall), so its times cannot be "
                               "checked against our clock")
        return out
    lo, hi = wall["start_ms"], wall["stop_ms"]
    out["wall_seconds"] = (hi - lo) / 1000
    if rep.start_ms is None or rep.stop_ms is None:
        return out  # no converged run: nothing timed to check (the verdict says so)
    out["logged_seconds"] = (rep.stop_ms - rep.start_ms) / 1000
    outside = [name for name, t in (("run_start", rep.start_ms), ("run_stop", rep.stop_ms))
               if not lo - LAUNCH_SLACK_MS <= t <= hi + LAUNCH_SLACK_MS]
    if outside:
        out["problems"].append(f"its logged {' and '.join(outside)} lie outside the launch ({lo} to {hi} ms since "
                               "the epoch, by the run driver's clock)")
    if rep.stop_ms - rep.start_ms > hi - lo + LAUNCH_SLACK_MS:
        out["problems"].append(f"it logs {out['logged_seconds']:.1f} s of training, but its code ran for "
                               f"{out['wall_seconds']:.1f} s")
    return out


def _family(name: str) -> str | None:
    """An accelerator's model (H100, A100, B200, GH200, L40S, MI300X) from a name such as NVML's."""
    for token in re.findall(r"[A-Z]+[0-9]+[A-Z]*", name.upper()):
        if not token.endswith("GB") and re.fullmatch(r"[A-Z]{1,3}[0-9]{2,4}[A-Z]?", token):
            return token
    return None


def _memory_bytes(capacity: Any) -> list[float]:
    """A description's accelerator_memory_capacity ("80 GB", "141GB", "96 GiB") as bytes, read both ways (GB, GiB)."""
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(G|T)i?B", str(capacity or ""), re.IGNORECASE)
    if not m:
        return []
    scale = 1 if m.group(2).upper() == "G" else 1024
    return [float(m.group(1)) * scale * 1e9, float(m.group(1)) * scale * 2**30]


def hardware_class(system_desc: dict[str, Any], recorded: list[Any]) -> tuple[bool, str]:
    """Whether the reproduced runs used the submission's class of accelerators: the same count per node, model and
    memory (within 10%) as the system description says, each run's as the run driver recorded it (run.json
    ``accelerators``, from NVML); (False, why) otherwise."""
    per_node = str(system_desc.get("accelerators_per_node", "")).strip() or "0"
    model = str(system_desc.get("accelerator_model_name", "")).strip()
    submitted = f"{per_node} x {model or 'unnamed accelerators'} per node" if per_node != "0" else "no accelerators"
    for acc in recorded:
        if not isinstance(acc, dict) or not isinstance(acc.get("count"), int):
            return False, f"the submission ran on {submitted}; the run driver recorded no accelerators of a run"
        if str(acc["count"]) != per_node:
            return False, f"the submission ran on {submitted}, a reproduced run on {acc['count']}"
        if acc["count"] == 0:
            continue
        if acc.get("unknown") or len(acc.get("devices") or []) != acc["count"]:
            return False, (f"the submission ran on {submitted}; a reproduced run's GPUs are unknown "
                           f"({acc.get('unknown')})")
        for device in acc["devices"]:
            name = str(device.get("name"))
            if _family(name) is None or _family(name) != _family(model):
                return False, f"the submission ran on {submitted}, a reproduced run on {name}"
            capacity, have = _memory_bytes(system_desc.get("accelerator_memory_capacity")), device.get("memory_bytes")
            if capacity and isinstance(have, int | float) and not any(0.9 <= have / c <= 1.1 for c in capacity):
                return False, (f"the submission ran on {submitted} with {system_desc['accelerator_memory_capacity']}, "
                               f"a reproduced run on {name} with {have / 2**30:.0f} GiB")
    return True, f"the same class: {submitted}"


def compare_benchmark(b: BenchmarkPlan, org_dir: Path, reproduced: Outputs, system: str,
                      system_desc: dict[str, Any], ruleset: str, tolerance: float | None = None) -> dict[str, Any]:
    """``reproduced``: the reproduction's outputs (the run stage's layout under reproduce_out), its runs
    ``system``'s."""
    submitted = [read_log(Path(f), org_dir) for f in b.result_files]
    runs = []
    for i, seed in enumerate(b.seeds):
        # the result, written by the package's code: read with bounds too
        rep = read_log(reproduced.result(system, b.name, i))
        compliant = _our_json(reproduced.verdict(system, b.name, i)).get("valid")
        summary = _our_json(reproduced.summary(system, b.name, i))
        sub = submitted[i]
        runs.append({
            "index": i, "seed": seed, "reproduced_seed": rep.seed, "submitted_file": Path(sub.file).name,
            "submitted_minutes": sub.minutes, "reproduced_minutes": rep.minutes,
            "submitted_epochs": sub.epochs, "reproduced_epochs": rep.epochs,
            "submitted_init_minutes": sub.init_minutes, "reproduced_init_minutes": rep.init_minutes,
            "metrics_identical": sub.evals == rep.evals and bool(sub.evals),
            "submitted_evals": sub.evals, "reproduced_evals": rep.evals, "compliant": compliant,
            "accelerators": summary.get("accelerators"), "image": summary.get("image"),
            "our_clock": clock_check(rep, summary.get("wall")),
            "hyperparameter_differences": _hyperparameter_diffs(sub, rep),
        })
    reasons: list[str] = []
    untrusted = [f"run {r['index']}: {p}" for r in runs for p in r["our_clock"]["problems"]]
    if untrusted:
        reasons.append("the package's log cannot be trusted (its times disagree with our clock): "
                       + "; ".join(untrusted[:10]))
    hp = {d["key"]: d for r in runs for d in r["hyperparameter_differences"]}
    for d in hp.values():
        reasons.append(f"hyperparameter {d['key']} differs: submitted {d['submitted']!r}, reproduced "
                       f"{d['reproduced']!r}")
    sub_epochs = [r["submitted_epochs"] for r in runs if r["submitted_epochs"] is not None]
    rep_epochs = [r["reproduced_epochs"] for r in runs if r["reproduced_epochs"] is not None]
    convergence = convergence_test(sub_epochs, rep_epochs)
    if convergence["passed"] is False:
        reasons.append(f"epochs to converge differ: mean {convergence['mean_submitted']:.2f} submitted, "
                       f"{convergence['mean_reproduced']:.2f} reproduced (tolerance {convergence['tolerance']:.2f})")
    division = str(system_desc.get("division", ""))
    bs = submitted[0].hyperparameters.get("global_batch_size")
    rcp = {"submitted": _rcp(b.name, division, ruleset, bs, [s.epochs for s in submitted if s.epochs is not None]),
           "reproduced": _rcp(b.name, division, ruleset, bs, rep_epochs)}
    sub_minutes = [s.minutes for s in submitted if s.minutes is not None]
    rep_minutes = [r["reproduced_minutes"] for r in runs if r["reproduced_minutes"] is not None]
    same_class, hardware_note = hardware_class(system_desc, [r["accelerators"] for r in runs])
    times = time_test(sub_minutes, rep_minutes)
    times["hardware_comparable"] = same_class
    if not same_class:
        times["note"] = f"{hardware_note}: times are not comparable"
    figures = numeric.assess(
        b.name, [{"minutes": s.minutes, "epochs": s.epochs, "init_minutes": s.init_minutes} for s in submitted],
        [{"minutes": r["reproduced_minutes"], "epochs": r["reproduced_epochs"],
          "init_minutes": r["reproduced_init_minutes"]} for r in runs],
        division=division, ruleset=ruleset, bs=bs, tolerance=tolerance, hardware_comparable=same_class)
    reasons.extend(figures["reasons"])
    dataset = None
    manifest_file = reproduced.root / "data" / b.name / DATA_MANIFEST  # reproduce_data's
    if manifest_file.is_file():
        dataset = {"submitted_sha256": b.dataset_sha256, "reproduced_sha256": sha256_file(manifest_file)}
        dataset["identical"] = dataset["submitted_sha256"] == dataset["reproduced_sha256"]
        if b.dataset_sha256 and not dataset["identical"]:
            reasons.append("the regenerated dataset's manifest differs from the submission's")
    if hp or untrusted:  # a different configuration ran, or its log's times are not ours: not reproduced
        verdict = "not reproduced"
    elif not rep_minutes or any(r["compliant"] is False for r in runs):
        verdict = "not comparable"
        reasons.insert(0, "no reproduced run converged" if not rep_minutes else
                       "a reproduced log fails the compliance gate")
    else:
        verdict = "not reproduced" if reasons else "reproduced"
    return {"benchmark": b.name, "verdict": verdict, "reasons": reasons, "runs": runs,
            "olympic_submitted": olympic(b.name, [s.minutes for s in submitted]),
            "olympic_reproduced": olympic(b.name, [r["reproduced_minutes"] for r in runs]) if len(runs) >= 3
            else None,
            "times": times, "numeric": figures, "convergence": convergence, "rcp": rcp, "dataset": dataset,
            "hyperparameters": submitted[0].hyperparameters, "throughput": "not logged by this implementation",
            "params": b.params}


def _system_description(org_dir: Path, system: str) -> dict[str, Any]:
    path = org_dir / "systems" / f"{system}.json"
    try:
        desc = safe_read.read_json(path, org_dir)
    except safe_read.UnsafeInput as e:
        raise ReproduceError(f"{e}; the system description cannot be read") from None
    if not isinstance(desc, dict):
        raise ReproduceError(f"{path}: not a system description (a JSON object)")
    return desc


def compare(p: Plan, reproduced_dir: Path, ruleset: str, package_changes: list[str],
            tolerance: float | None = None) -> dict[str, Any]:
    """The report's document; ``package_changes``: what the reproduction changed in the package (an error);
    ``tolerance``: the time to train's (a fraction; None: numeric.default_tolerance per benchmark)."""
    org_dir = Path(p.package)
    desc = _system_description(org_dir, p.system)
    benchmarks = [compare_benchmark(b, org_dir, Outputs(reproduced_dir), p.system, desc, ruleset, tolerance)
                  for b in p.benchmarks.values()]
    verdicts = {b["verdict"] for b in benchmarks}
    overall = ("not comparable" if "not comparable" in verdicts or package_changes else
               "not reproduced" if "not reproduced" in verdicts else "reproduced")
    notes = list(p.notes)
    if package_changes:
        notes.insert(0, "Error: the package changed while it was reproduced, so its results are no longer the ones "
                     "submitted (its code ran with your rights): " + "; ".join(package_changes[:20]))
    manifest = org_dir / MANIFEST
    return {"package": p.package, "system": p.system, "runs": p.runs, "notes": notes, "verdict": overall,
            "package_changes": package_changes,
            "manifest_sha256": sha256_file(manifest) if manifest.is_file() else None,
            "method": METHOD, "benchmarks": benchmarks}
