"""Reproduce a package's results: re-run them with the package's own implementation and compare.

``snakemake --cores all --config reproduce=ORG_DIR system=SYSTEM only=[...] runs=K`` (rules/reproduce.smk)
plans the re-runs here (:func:`plan`: everything missing is named before any run), stages the package's
implementation folder (``benchmarks/<bm>/implementations/<impl>/``) into a runnable copy (:func:`stage`),
regenerates the dataset through the implementation's own generator (ours) or takes the given folder (a
vendor's), re-runs the first K results with their logged seeds through the pipeline's run driver
(mlrepro.runs.driver, from a launch file as the main pipeline writes it: run_and_time.sh and the config file
for the system) and the usual compliance gate, and writes the comparison (:func:`compare`) as JSON and HTML.

The verdict per benchmark, and the rules behind it:

- *not reproduced*: a logged hyperparameter differs (named; this decides first).
- *not comparable*: no reproduced run converged, or a reproduced log fails the compliance gate.
- *not reproduced*: the epochs to converge differ by more
  than the tolerance (two standard errors of the difference of the means, at least half an epoch; the
  RCP rule's question, "does the submission converge faster than the implementation does?", asked
  of the reproduction instead of the reference runs); or, where the hardware class matches, the
  times to train differ by Mann-Whitney U (two-sided, alpha 0.05) and by more than 10% in median.
- *reproduced*: otherwise. With the same seeds on a deterministic CPU implementation the eval metrics
  are bit-identical; the report says per run whether they are.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from mlrepro.core import atomic, mllog_reader, rulesets
from mlrepro.core.config import PIPELINE_KEYS, deep_merge
from mlrepro.package.provenance import MANIFEST
from mlrepro.runs.implementation import DATA_MOUNTS, LOG_MOUNT, MINI, RUN_SCRIPT, ImplementationError, capture

ALPHA = 0.05
TIME_TOLERANCE = 0.10  # relative median difference that, with a significant test, fails a reproduction
# Logged before run_start, but not hyperparameters: identity, seeding and set-up events.
_NOT_HYPERPARAMETERS = {"cache_clear", "init_start", "init_stop", "seed", "weights_initialization",
                        "submission_benchmark", "submission_org", "submission_platform", "submission_division",
                        "submission_status", "submission_poc_name", "submission_poc_email"}


# The submission identity the run step logs (mlrepro.train's --submission).
_SUBMISSION = ("org", "platform", "division", "status")


class ReproduceError(ValueError):
    """What is missing to reproduce a package, in one paragraph, before any run."""


# ---------------------------------------------------------------------------------------------------------
# The implementation inside a package: ``benchmarks/<bm>/implementations/<impl>/`` in the MLCommons
# convention (run_and_time.sh, config_<SYSTEM>.sh), a vendor's as it is, or this pipeline's own as
# mlrepro/package/assemble.py writes it (workflows/<bm>/ holding run_and_time.sh and config_CPU.sh, beside the
# training code mlrepro/ it imports). Either runs through the pipeline's run driver (mlrepro.runs.driver)
# from a launch file (:func:`launch_spec`), as the main pipeline's run rule launches it.

@dataclass(frozen=True)
class Implementation:
    folder: Path  # implementations/<impl>/ in the package
    run_folder: Path  # the folder holding run_and_time.sh (ours: workflows/<bm>/ inside ``folder``)
    config: Path  # the config file for the system
    kind: str  # MINI (this pipeline's own: shared code on PYTHONPATH, hyperparameters as JSON) or "folder"

    @property
    def name(self) -> str:
        return self.folder.name


def _config_for(folder: Path, system: str, kind: str, chosen: str | None) -> Path | None:
    """The config file named ``chosen`` (system_config, as the pipeline takes it), else config_<X>.sh for
    ``system``: the longest X that the system's name starts with (NVIDIA's dgxa100_ngc21.09_mxnet ->
    config_DGXA100.sh); ours falls back to config_CPU.sh as the pipeline does."""
    if chosen:
        return folder / chosen if "/" not in chosen and (folder / chosen).is_file() else None
    matches = [p for p in folder.glob("config_*.sh")
               if system.lower().startswith(p.stem.removeprefix("config_").lower())]
    best = max(matches, key=lambda p: len(p.stem), default=None)
    if best is None and kind == MINI and (folder / "config_CPU.sh").is_file():
        return folder / "config_CPU.sh"
    return best


def locate_implementation(org_dir: Path, benchmark: str, system: str = "", system_config: str | None = None
                          ) -> Implementation:
    """The package's implementation of ``benchmark`` with its config file for ``system`` (or the file
    ``system_config`` names)."""
    base = org_dir / "benchmarks" / benchmark / "implementations"
    candidates: list[tuple[Path, Path, str]] = []
    for folder in sorted(p for p in base.glob("*") if p.is_dir()):
        if (folder / RUN_SCRIPT).is_file():
            candidates.append((folder, folder, "folder"))
        elif (folder / "workflows" / benchmark / RUN_SCRIPT).is_file() and (folder / "mlrepro").is_dir():
            candidates.append((folder, folder / "workflows" / benchmark, MINI))
    if not candidates:
        present = ", ".join(sorted(p.name for p in base.glob("*"))) or "none"
        raise ReproduceError(
            f"The package {org_dir} has no runnable implementation of {benchmark}: {base} holds {present}, and none "
            f"has {RUN_SCRIPT} (the MLCommons convention) or workflows/{benchmark}/{RUN_SCRIPT} beside mlrepro/ "
            f"(the layout this pipeline packages). Supply the implementation folder under {base}/<name>/, or leave "
            f"{benchmark} out with only=[...].")
    for folder, run_folder, kind in candidates:
        if (config := _config_for(run_folder, system, kind, system_config)) is not None:
            return Implementation(folder, run_folder, config, kind)
    configs = ", ".join(sorted(p.name for _, r, _ in candidates for p in r.glob("config_*.sh"))) or "none"
    raise ReproduceError(
        f"The package's implementation of {benchmark} ({', '.join(str(r) for _, r, _ in candidates)}) has no config "
        f"file for system {system}{f' named {system_config}' if system_config else ''} (it has: {configs}). Give "
        f"the system whose config_<SYSTEM>.sh it has, or name the file as benchmarks.{benchmark}.system_config.")


def stage(impl: Implementation, dest: Path) -> None:
    """A copy of the package's implementation folder at ``dest`` to run from: whatever a run writes
    beside its script (bytecode, logs) stays out of the audited package."""
    with atomic.atomic_dir(dest) as tmp:
        shutil.copytree(impl.folder, tmp, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), symlinks=True,
                        dirs_exist_ok=True)


def implementation_params(impl: Implementation) -> dict[str, Any]:
    """Ours: the hyperparameters its defaults.yaml gives; a vendor's take theirs from the config file."""
    defaults = impl.run_folder / "defaults.yaml"
    return (yaml.safe_load(defaults.read_text()) or {}) if impl.kind == MINI and defaults.is_file() else {}


def launch_spec(b: BenchmarkPlan, staged: Path, data_dir: Path, *, threads: int, device: str) -> dict[str, Any]:
    """The launch file mlrepro.runs.driver reads (rules/runs.smk writes the same for the main pipeline), for
    the staged copy of the package's implementation."""
    run_folder = staged / Path(b.run_folder).relative_to(b.implementation)
    env = dict(b.env)
    if b.kind == MINI:  # its training code is the package's: the staged copy comes first on the path
        env["PYTHONPATH"] = str(staged)
    return {"benchmark": b.name, "kind": b.kind, "name": Path(b.implementation).name, "folder": str(run_folder),
            "config_file": b.config_file, "script_in_container": f"./{RUN_SCRIPT}", "env": env, "params": b.params,
            "data_dir": str(data_dir), "data_mount": DATA_MOUNTS.get(b.name, "/data"), "log_mount": LOG_MOUNT,
            "gpus": b.gpus, "threads": threads, "nodes": b.nodes, "tasks_per_node": 1, "device": device,
            "drop_caches": False, "submission": b.submission}


# ---------------------------------------------------------------------------------------------------------
# Reading a result log.

@dataclass
class RunLog:
    file: str
    seed: Any = None
    minutes: float | None = None  # time to train; None unless the run converged
    status: str | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    evals: list[list[Any]] = field(default_factory=list)  # [epoch or samples, value]
    epochs: float | None = None  # epochs (or samples) to converge: the last eval's epoch_num
    submission: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def read_log(path: Path) -> RunLog:
    log = RunLog(str(path))
    start = stop = None
    try:
        for e in mllog_reader.events(path):
            key, value, meta = e.get("key"), e.get("value"), e.get("metadata") or {}
            if key == "run_start":
                start = e.get("time_ms")
            elif key == "run_stop":
                stop, log.status = e.get("time_ms"), str(meta.get("status"))
            elif key == "seed":
                log.seed = value
            elif str(key).startswith("submission_"):
                log.submission[str(key).removeprefix("submission_")] = value
            elif key == "eval_accuracy":
                log.evals.append([meta.get("epoch_num", meta.get("samples_count")), value])
            elif start is None and e.get("event_type") == "POINT_IN_TIME" and key not in _NOT_HYPERPARAMETERS:
                log.hyperparameters[str(key)] = value
    except (OSError, ValueError, UnicodeDecodeError) as e:
        log.error = f"{type(e).__name__}: {e}"
        return log
    if start is not None and stop is not None and log.status == "success":
        log.minutes = (stop - start) / 60_000
        log.epochs = log.evals[-1][0] if log.evals else None
    return log


# ---------------------------------------------------------------------------------------------------------
# The plan.

@dataclass
class BenchmarkPlan:
    name: str
    implementation: str
    result_files: list[str]  # every submitted result, in order
    seeds: list[int]  # of the first K, the ones re-run
    params: dict[str, Any]
    data_seed: int
    submission: dict[str, Any]
    dataset_sha256: str | None  # the submitted dataset manifest's hash (from the provenance manifest)
    run_folder: str = ""  # the package's folder holding run_and_time.sh (inside ``implementation``)
    config_file: str = ""  # its config file for the system
    kind: str = MINI
    nodes: int = 1
    gpus: int = 0  # nodes x accelerators per node, from the config file
    data_dir: str | None = None  # a given dataset folder; None: ours, regenerated by the implementation
    env: dict[str, str] = field(default_factory=dict)  # what the config file exports


@dataclass
class Plan:
    package: str
    system: str
    runs: int
    manifest: bool
    notes: list[str]
    benchmarks: dict[str, BenchmarkPlan]


def _system(org_dir: Path, system: str) -> str:
    systems = sorted(p.name for p in (org_dir / "results").glob("*") if p.is_dir())
    if system in ("", "auto") and len(systems) == 1:
        return systems[0]
    if system not in systems:
        raise ReproduceError(
            f"The package {org_dir} has no results for system {system!r} (results/ holds: "
            f"{', '.join(systems) or 'nothing'}). Give system=NAME, one of those.")
    if not (org_dir / "systems" / f"{system}.json").is_file():
        raise ReproduceError(f"The package {org_dir} has results for {system} but no systems/{system}.json: "
                             "the system it ran on is undescribed; supply the system description.")
    return system


def plan(org_dir: Path, *, system: str, only: list[str], runs: int | None, overrides: dict[str, Any],
         default_data_seed: int, data_dirs: dict[str, str] | None = None,
         system_configs: dict[str, str] | None = None) -> Plan:
    """What to re-run; a :class:`ReproduceError` naming everything missing, before any run."""
    org_dir = org_dir.resolve()
    if not (org_dir / "results").is_dir():
        raise ReproduceError(f"reproduce={org_dir}: not a package organisation folder (it has no results/). "
                             "Give the folder that holds systems/, results/ and benchmarks/.")
    system = _system(org_dir, system)
    present = sorted(p.name for p in (org_dir / "results" / system).iterdir() if p.is_dir())
    chosen = only or present
    missing = [b for b in chosen if b not in present]
    if missing:
        raise ReproduceError(f"The package has no results of {', '.join(missing)} for {system} (it has: "
                             f"{', '.join(present)}). Choose among those with only=[...].")
    notes: list[str] = []
    manifest_path = org_dir / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else None
    if manifest is None:
        notes.append(f"The package has no {MANIFEST}: the implementation's defaults are run with the logged seeds "
                     f"and data seed {default_data_seed}; datasets and images cannot be compared.")
    config = (manifest or {}).get("config") or {}
    data_seed = int(config.get("data_seed", default_data_seed))
    problems: list[str] = []
    out: dict[str, BenchmarkPlan] = {}
    for b in chosen:
        try:
            # the config file given here, else the one the submission's configuration chose, else the system's
            chosen = (system_configs or {}).get(b) or ((config.get("benchmarks") or {}).get(b) or {}).get(
                "system_config")
            impl = locate_implementation(org_dir, b, system, chosen)
            env = capture(impl.config)
            nodes, per_node = int(env.get("DGXNNODES") or 1), int(env.get("DGXNGPU") or 0)
        except ReproduceError as e:
            problems.append(str(e))
            continue
        except ImplementationError as e:
            problems.append(f"{b}: {e}")
            continue
        except ValueError:
            problems.append(f"{b}: {impl.config}: DGXNNODES or DGXNGPU is not a whole number.")
            continue
        files = sorted((org_dir / "results" / system / b).glob("result_*.txt"),
                       key=lambda p: int(p.stem.rpartition("_")[2]) if p.stem.rpartition("_")[2].isdigit() else 0)
        k = min(runs or rulesets.required_runs(b), len(files))
        submitted = [read_log(f) for f in files[:k]]
        unseeded = [Path(s.file).name for s in submitted if not isinstance(s.seed, int)]
        if unseeded:
            problems.append(f"{b}: {', '.join(unseeded)} log no integer seed; a reproduction with the same seeds "
                            "needs them.")
            continue
        data_dir = None
        if impl.kind == MINI:
            params = deep_merge(deep_merge(implementation_params(impl), (config.get("benchmarks") or {}).get(b) or {}),
                                overrides.get(b) or {})
            schema = impl.run_folder / "params.schema.yaml"
            if schema.is_file():
                errors = sorted(jsonschema.Draft202012Validator(yaml.safe_load(schema.read_text())).iter_errors(params),
                                key=lambda e: list(map(str, e.absolute_path)))
                if errors:
                    problems.append(f"{b}: the parameters fail the implementation's {schema.name}: " + "; ".join(
                        f"{'.'.join(map(str, e.absolute_path)) or '(top level)'}: {e.message}" for e in errors) + ".")
                    continue
            params = {k: v for k, v in params.items() if k not in PIPELINE_KEYS}  # as the pipeline runs it
        else:
            params = {}
            if overrides.get(b):
                problems.append(f"{b}: {', '.join(sorted(overrides[b]))}: {impl.name} takes its hyperparameters from "
                                f"{impl.config.name}; a changed hyperparameter needs a changed config file.")
                continue
            given = (data_dirs or {}).get(b)
            if not given or not Path(given).is_dir():
                problems.append(
                    f"{b}: {impl.name} runs on its prepared dataset, and "
                    + (f"benchmarks.{b}.data_dir={given} is not a folder" if given else "none was given")
                    + f": prepare it as {impl.folder}/README.md says and give its folder as "
                    f"benchmarks.{b}.data_dir (mounted at {DATA_MOUNTS.get(b, '/data')}).")
                continue
            data_dir = str(Path(given).resolve())
        datasets = (manifest or {}).get("datasets") or {}
        identity = {k: submitted[0].submission.get(k) for k in _SUBMISSION}
        out[b] = BenchmarkPlan(b, str(impl.folder), [str(f) for f in files], [int(s.seed) for s in submitted],
                               params, data_seed, {k: str(v if v is not None else "") for k, v in identity.items()},
                               (datasets.get(b) or {}).get("sha256"), str(impl.run_folder), impl.config.name,
                               impl.kind, nodes, nodes * per_node, data_dir, env)
    if problems:
        raise ReproduceError("Cannot reproduce this package: " + " ".join(problems))
    if (manifest or {}).get("engines", ["native"]) != ["native"]:
        notes.append("The submission ran in a container; the reproduction runs natively with the project's "
                     "environment, so the image digests cannot match.")
    return Plan(str(org_dir), system, max(len(p.seeds) for p in out.values()), manifest is not None, notes, out)


# ---------------------------------------------------------------------------------------------------------
# The comparison.

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


def _hyperparameter_diffs(submitted: RunLog, reproduced: RunLog) -> list[dict[str, Any]]:
    keys = sorted(submitted.hyperparameters.keys() | reproduced.hyperparameters.keys())
    return [{"key": k, "submitted": submitted.hyperparameters.get(k, "(not logged)"),
             "reproduced": reproduced.hyperparameters.get(k, "(not logged)")}
            for k in keys if submitted.hyperparameters.get(k, "(not logged)")
            != reproduced.hyperparameters.get(k, "(not logged)")]


def compare_benchmark(b: BenchmarkPlan, reproduced_dir: Path, system_desc: dict[str, Any], ruleset: str
                      ) -> dict[str, Any]:
    submitted = [read_log(Path(f)) for f in b.result_files]
    runs = []
    for i, seed in enumerate(b.seeds):
        run_dir = reproduced_dir / "runs" / b.name / str(i)
        rep = read_log(run_dir / "result.txt")
        verdict_file = reproduced_dir / "compliance" / b.name / f"{i}.json"
        compliant = json.loads(verdict_file.read_text()).get("valid") if verdict_file.is_file() else None
        summary = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").is_file() else {}
        sub = submitted[i]
        runs.append({
            "index": i, "seed": seed, "reproduced_seed": rep.seed, "submitted_file": Path(sub.file).name,
            "submitted_minutes": sub.minutes, "reproduced_minutes": rep.minutes,
            "submitted_epochs": sub.epochs, "reproduced_epochs": rep.epochs,
            "metrics_identical": sub.evals == rep.evals and bool(sub.evals),
            "submitted_evals": sub.evals, "reproduced_evals": rep.evals, "compliant": compliant,
            "device": summary.get("device"), "image": summary.get("image"),
            "hyperparameter_differences": _hyperparameter_diffs(sub, rep),
        })
    reasons: list[str] = []
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
    accelerators = str(system_desc.get("accelerators_per_node", "")).strip()
    devices = {str(r["device"]) for r in runs if r["device"]}
    same_class = (accelerators in ("0", "") and devices <= {"cpu"}) or \
        (accelerators not in ("0", "") and bool(devices) and all(d.startswith("cuda") for d in devices))
    times = time_test(sub_minutes, rep_minutes)
    times["hardware_comparable"] = same_class
    if not same_class:
        times["note"] = (f"the submission ran on {accelerators or 'unknown'} accelerators per node, the "
                         f"reproduction on {', '.join(sorted(devices)) or 'nothing'}: times are not comparable")
    elif times["significant"]:
        reasons.append(f"times to train differ: {times['test']} p = {times['p']:.4f} < {ALPHA}, medians "
                       f"{times['median_submitted']:.3f} and {times['median_reproduced']:.3f} minutes")
    dataset = None
    manifest_file = reproduced_dir / "data" / b.name / "MANIFEST.sha256"
    if manifest_file.is_file():
        from mlrepro.core.hashing import sha256_file

        dataset = {"submitted_sha256": b.dataset_sha256, "reproduced_sha256": sha256_file(manifest_file)}
        dataset["identical"] = dataset["submitted_sha256"] == dataset["reproduced_sha256"]
        if b.dataset_sha256 and not dataset["identical"]:
            reasons.append("the regenerated dataset's manifest differs from the submission's")
    if hp:  # a different configuration ran: whatever else happened, the result is not reproduced
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
            "times": times, "convergence": convergence, "rcp": rcp, "dataset": dataset,
            "hyperparameters": submitted[0].hyperparameters, "throughput": "not logged by this implementation",
            "params": b.params}


def compare(p: Plan, reproduced_dir: Path, ruleset: str) -> dict[str, Any]:
    org_dir = Path(p.package)
    desc = json.loads((org_dir / "systems" / f"{p.system}.json").read_text())
    benchmarks = [compare_benchmark(b, reproduced_dir, desc, ruleset) for b in p.benchmarks.values()]
    verdicts = {b["verdict"] for b in benchmarks}
    overall = ("not comparable" if "not comparable" in verdicts else
               "not reproduced" if "not reproduced" in verdicts else "reproduced")
    manifest = org_dir / MANIFEST
    return {"package": p.package, "system": p.system, "runs": p.runs, "notes": p.notes, "verdict": overall,
            "manifest_sha256": _sha256(manifest) if manifest.is_file() else None,
            "method": __doc__.split("The verdict per benchmark, and the rules behind it:")[1].strip(),
            "benchmarks": benchmarks}


def _sha256(path: Path) -> str:
    from mlrepro.core.hashing import sha256_file

    return sha256_file(path)


def write_report(doc: dict[str, Any], json_out: Path, html_out: Path) -> None:
    from mlrepro.report import render

    atomic.write_json(json_out, doc)
    render.render("reproduction.html.j2", html_out, r=doc)


# ---------------------------------------------------------------------------------------------------------

def _plan_from_args(args: argparse.Namespace) -> Plan:
    return plan(args.package, system=args.system, only=args.only, runs=args.runs,
                overrides=json.loads(args.overrides or "{}"), default_data_seed=args.data_seed,
                data_dirs=json.loads(args.data_dirs or "{}"), system_configs=json.loads(args.system_configs or "{}"))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.reproduce.cli", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="step", required=True)
    s = sub.add_parser("stage", help="a runnable copy of the package's implementation of one benchmark")
    s.add_argument("--package", type=Path, required=True)
    s.add_argument("--benchmark", required=True)
    s.add_argument("--system", required=True)
    s.add_argument("--system-config", default=None)
    s.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("report", help="compare the reproduced runs with the submission")
    r.add_argument("--package", type=Path, required=True)
    r.add_argument("--system", default="auto")
    r.add_argument("--only", nargs="*", default=[])
    r.add_argument("--runs", type=int, default=None)
    r.add_argument("--overrides", default=None, help="benchmark -> parameter overrides, as the plan had them")
    r.add_argument("--data-seed", type=int, default=20220629)
    r.add_argument("--data-dirs", default=None, help="benchmark -> the given dataset folder, as the plan had them")
    r.add_argument("--system-configs", default=None, help="benchmark -> the given config file, as the plan had them")
    r.add_argument("--ruleset", default="2.0.0")
    r.add_argument("--reproduced", type=Path, required=True, help="the reproduction's output folder")
    r.add_argument("--json", type=Path, required=True)
    r.add_argument("--html", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        if args.step == "stage":
            stage(locate_implementation(args.package.resolve(), args.benchmark, args.system, args.system_config),
                  args.out)
            return
        doc = compare(_plan_from_args(args), args.reproduced, args.ruleset)
    except ReproduceError as e:
        sys.exit(f"error: {e}")
    write_report(doc, args.json, args.html)
    verdicts = ", ".join(f"{b['benchmark']}: {b['verdict']}" for b in doc["benchmarks"])
    print(f"reproduction: {doc['verdict']} ({verdicts}); report {args.html}")


if __name__ == "__main__":
    main()
