"""``snakemake inference_preview``: what the vendor flow will run, before any GPU hour (inference_preview.json).

One entry per (system, benchmark, scenario, mode), each with ``steps`` (the make commands as argument lists, where
each runs, and the job that runs it: image, build, data and engines are shared) and ``user_conf``, the text the run
will get from NVIDIA's configs for that system (nvconfig.user_conf), with ``user_conf_pending`` naming a value only
the run knows. ``round`` says what was detected from the folder's Makefiles. Runs nothing of the folder: it reads
its Makefiles and Python sources as text (a job, so that a hostile folder cannot act while Snakemake plans).
"""

from __future__ import annotations

import json
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.job import Job
from mlrepro.inference import rounds
from mlrepro.inference.vendor.nvconfig import ConfigError, user_conf
from mlrepro.inference.vendor.steps import Planner, Spec, Unit


def entries(spec: Spec) -> dict[str, Any]:
    planner = Planner(spec)
    out = []
    for unit in planner.units():
        resolved = planner.folder.resolve(unit.benchmark, unit.scenario, planner.system)
        text, pending = _user_conf(planner, unit, resolved.fields)
        out.append({"system": planner.system, "system_id": planner.system_id, "benchmark": unit.benchmark,
                    "scenario": unit.scenario, "mode": unit.mode, "config": resolved.config,
                    "config_file": resolved.file, "workload": resolved.workload,
                    "log_dir": planner.log_dir(unit) if unit.mode in ("performance", "accuracy") else None,
                    "steps": planner.steps(unit), "user_conf": text, "user_conf_pending": pending})
    return {"code": str(spec.code.resolve()), "image": spec.image, "round": planner.flow.describe(), "entries": out}


def _user_conf(planner: Planner, unit: Unit, fields: dict[str, Any]) -> tuple[str, dict[str, str]]:
    return user_conf(unit.scenario, fields, planner.harness_flags(unit))


def table(preview: dict[str, Any]) -> str:
    lines = [f"{'benchmark':<14} {'scenario':<13} {'mode':<12} {'config':<24} user.conf"]
    for e in preview["entries"]:
        conf = "; ".join(line.split(" = ", 1)[0].split(".")[-1] + "=" + line.split(" = ", 1)[1]
                         for line in e["user_conf"].splitlines())
        lines.append(f"{e['benchmark']:<14} {e['scenario']:<13} {e['mode']:<12} {e['config']:<24} {conf}")
    return "\n".join(lines)


def package_plan(round_name: str, checker: str) -> dict[str, Any]:
    """What becomes of the staging: the declared round's layout (vendor_package) and the checker that judges it
    (vendor_check), not the folder's check_submission (it clones mlcommons/inference at run time)."""
    new_layout = rounds.get(round_name).results_hold_measurements
    return {"round": round_name,
            "layout": "relaid out for the round: measurements/<sys>/<model>/<scenario>/<sys>_<scenario>.json -> "
                      "results/.../measurements.json (with user.conf, README.md), compliance/.../<TEST> -> "
                      "results/.../<TEST>, code -> src; each change in the package's relayout.txt"
                      if new_layout else "as staged (measurements/, compliance/ and code/ beside results/)",
            "checker": checker or None,
            "check": f"the official {round_name} checker of {checker} (tools/submission), on a copy of the package"
                     if checker else "not run: set inference.mlcommons_inference to a checkout or unpacked tarball "
                     f"of mlcommons/inference at the {round_name} tag (the folder's check_submission clones it at run "
                     "time, which clusters and CI cannot reach)"}


def job(job: Job) -> None:
    """The inference_preview rule's job (rules/inference_vendor.smk): params vendor (inference.vendor), org, round
    (inference.round) and checker (inference.mlcommons_inference, or empty)."""
    if not job.params.get("vendor"):
        raise ConfigError("inference.vendor is not set: the preview shows a vendor's code folder's flow; set "
                          "inference.vendor.code, system_id, benchmarks and scenarios (docs/submitter.md)")
    preview = entries(Spec.from_config(job.params["vendor"], job.params["org"]))
    preview["package"] = package_plan(str(job.params["round"]), str(job.params.get("checker") or ""))
    atomic.write_text(job.output.first, json.dumps(preview, indent=1, default=repr) + "\n")
    print(table(preview))
    print(f"package: {preview['package']['layout']}\ncheck: {preview['package']['check']}")
