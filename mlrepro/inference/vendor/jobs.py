"""The vendor flow's jobs (rules/inference_vendor.smk): the working copy of the code folder, then each job's make
steps (steps.Planner) on the host or in the image, with telemetry beside every GPU step, and a record per job.

The folder's own Makefiles do the work; this module only starts them, each as an argument list (no shell of ours),
in the working copy under the output folder (the submitter's folder is never written), with MLPERF_SCRATCH_PATH set.
A step that fails stops its job with the end of its log; the job's record is written only after every step passed.
"""

from __future__ import annotations

import getpass
import json
import platform
import shutil
import time
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.errors import MlreproError
from mlrepro.core.job import Job
from mlrepro.engines import Engine, Mount, get_engine
from mlrepro.inference import summary
from mlrepro.inference.vendor.steps import Planner, Spec
from mlrepro.report.render import render

CONTAINER_ROOT = "/work"  # where NVIDIA's launch_docker mounts the project root; the recipes' paths assume it
# Steps that hold the node's GPUs: telemetry samples beside them.
GPU_TARGETS = ("generate_engines", "run_harness")


class StepFailed(MlreproError, RuntimeError):
    """A make step of the vendor flow exited non-zero."""


def work_job(job: Job) -> None:
    """vendor_work: copy the code folder (links kept as links, its build/ left out) to params workdir. Over an
    earlier copy: its build/ (engines, logs, staging: hours of GPU work) is kept, the sources are copied again."""
    src, dst = Path(job.params["code"]).resolve(), Path(job.params["workdir"])
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("build"), dirs_exist_ok=True)
    atomic.write_json(job.output.first, {"code": str(src), "workdir": str(dst)})


def image_name(record: dict[str, Any] | None, given: str | None) -> str | None:
    if given:
        return given
    if record and record.get("image"):
        return str(record["image"])
    # Makefile.docker's tag of the image build_docker makes: mlperf-inference:$(UNAME)-$(ARCH)-latest
    return f"mlperf-inference:{getpass.getuser()}-{platform.machine()}-latest"


def _run(engine: Engine, step: dict[str, Any], workdir: Path, scratch: Path, image: str | None, gpus: list[int],
         log: Path, custom: Path | None) -> int:
    env = {"MLPERF_SCRATCH_PATH": str(scratch)}
    if custom is not None:  # the code reads custom systems and configs from there (system_list.py, configuration.py)
        env["MLPINF_CUSTOM_DEFINITION_PATH"] = str(custom)
    if step["where"] == "host" or engine.name == "native":
        return get_engine("native").run(step["argv"], image=None, mounts=[], gpus=gpus, env=env, log=log,
                                        workdir=str(workdir))
    mounts = [Mount(workdir, read_only=False, target=CONTAINER_ROOT), Mount(scratch, read_only=False)]
    if custom is not None:
        mounts.append(Mount(custom, read_only=True))
    return engine.run(step["argv"], image=image, mounts=mounts, gpus=gpus, env=env, log=log,
                      workdir=CONTAINER_ROOT)


def _tail(log: Path, n: int = 20) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()[-n:] if log.is_file() else []
    return "\n".join(line[:500] for line in lines)


def step_job(job: Job) -> None:
    """Every vendor_* rule but vendor_work and the preview: params steps (this job's steps, in order), workdir,
    scratch, engine, image, gpus, hz, backend; input image (the image job's record) where it has one."""
    p = job.params
    workdir, scratch = Path(p["workdir"]), Path(p["scratch"])
    scratch.mkdir(parents=True, exist_ok=True)
    record_path = job.input.get("image")
    image = image_name(json.loads(record_path.read_text()) if record_path else None, p.get("image"))
    engine = get_engine(p["engine"])
    custom = Path(p["custom_definition"]).resolve() if p.get("custom_definition") else None
    gpus = list(range(int(p.get("gpus") or 0)))
    log = Path(job.log) if job.log else job.output.first.with_suffix(".log")
    done: list[dict[str, Any]] = []
    telemetry: dict[str, Any] | None = None
    for step in p["steps"]:
        gpu_step = step["target"] in GPU_TARGETS or step["target"].startswith("run_audit_test")
        tel_dir = job.output.first.parent / (job.output.first.stem + ".telemetry")
        sampler = None
        if gpu_step and p.get("hz"):
            from mlrepro.telemetry import start_sampler

            sampler = start_sampler(tel_dir, hz=float(p["hz"]), backend=p.get("backend") or "nvml")
        start = time.time()
        code = _run(engine, step, workdir, scratch, image, gpus, log, custom)
        stop = time.time()
        if sampler is not None:
            sampler.stop()
            from mlrepro.telemetry import summarize

            telemetry = summarize(tel_dir, int(start * 1000), int(stop * 1000))
        done.append({**step, "exit_code": code, "seconds": round(stop - start, 3)})
        if code != 0:
            raise StepFailed(f"{job.rule}: `{' '.join(step['argv'])}` ({step['where']}, in {workdir}) exited with "
                             f"status {code}; the end of its log {log}:\n{_tail(log)}")
    record: dict[str, Any] = {"rule": job.rule, "workdir": str(workdir), "image": image, "steps": done}
    if telemetry is not None:
        record["telemetry"] = telemetry
    if p.get("result_dir"):
        record["result"] = result(workdir / p["result_dir"], telemetry, int(p.get("accelerators") or 0))
    atomic.write_json(job.output.first, record)


def result(run_dir: Path, telemetry: dict[str, Any] | None, accelerators: int) -> dict[str, Any]:
    """A performance run's headline from LoadGen's summary, per accelerator, with the accelerator energy."""
    found = sorted(run_dir.glob("*/*/*/mlperf_log_summary.txt"))
    if not found:
        raise StepFailed(f"{run_dir}: no mlperf_log_summary.txt under <system>/<benchmark>/<scenario>/ after the run "
                         "(the harness wrote nowhere LOG_DIR says)")
    s = summary.read(found[0])
    out: dict[str, Any] = {"summary": str(found[0]), "scenario": s.scenario, "mode": s.mode,
                           "metric": s.metric_name, "value": s.metric, "unit": s.units, "valid": s.valid,
                           "accelerators": accelerators}
    if accelerators and s.units == "samples/s" and s.metric is not None:
        out["per_accelerator"] = s.metric / accelerators
    if telemetry:
        out["accelerator_energy_j"] = telemetry.get("accelerator_energy_j")
    return out


def report_rows(records: list[Path]) -> list[dict[str, Any]]:
    """Each performance run's headline from its job record (<jobs>/run/<bm>/<scenario>/performance.json), per
    accelerator, beside the accelerator energy and mean power its telemetry measured over the run step."""
    rows = []
    for path in records:
        rec = json.loads(path.read_text())
        r = rec.get("result")
        if not r:
            continue
        tel = rec.get("telemetry") or {}
        seconds = sum(float(s.get("seconds") or 0) for s in rec.get("steps", []) if s.get("target") in GPU_TARGETS)
        energy = r.get("accelerator_energy_j")
        rows.append({"benchmark": path.parent.parent.name, "scenario": r["scenario"], "metric": r["metric"],
                     "value": r["value"], "unit": r["unit"], "valid": r["valid"], "accelerators": r["accelerators"],
                     "per_accelerator": r.get("per_accelerator"), "accelerator_energy_j": energy,
                     "mean_power_w": energy / seconds if energy is not None and seconds > 0 else None,
                     "seconds": seconds, "telemetry": tel.get("nvml") if tel else None,
                     "gpus": len(tel.get("gpus") or []), "summary": r.get("summary", "")})
    return rows


def report_job(job: Job) -> None:
    """vendor_report: throughput per accelerator and energy beside each performance run, as CSV (output table), as
    the vendor flow's HTML report (output html) and as the rows the pipeline's report shows with the same table
    (output rows: report_templates/inference_vendor_runs.html.j2)."""
    rows = report_rows(list(job.input))
    atomic.write_json(job.output["rows"], {"rows": rows})
    lines = ["benchmark,scenario,metric,value,unit,valid,accelerators,per_accelerator,accelerator_energy_j"]
    for r in rows:
        lines.append(",".join("" if r[k] is None else str(r[k]) for k in (
            "benchmark", "scenario", "metric", "value", "unit", "valid", "accelerators", "per_accelerator",
            "accelerator_energy_j")))
    atomic.write_text(job.output["table"], "\n".join(lines) + "\n")
    render("inference_vendor.html.j2", job.output["html"], rows=rows)


def planner(vendor: dict[str, Any], org: str) -> Planner:
    return Planner(Spec.from_config(vendor, org))
