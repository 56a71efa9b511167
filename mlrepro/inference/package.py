"""The inference submission package in the layout of the declared round (mlrepro/inference/rounds.py):

v2.0 (to v5.1):
    <division>/<org>/systems/<system>.json
    <division>/<org>/code/<model>/                              the served model's source, a README
    <division>/<org>/measurements/<system>/<model>/<scenario>/  <system>_<scenario>.json, user.conf, mlperf.conf,
                                                                README.md
    <division>/<org>/results/<system>/<model>/<scenario>/performance/run_1/   LoadGen's summary and detail
    <division>/<org>/results/<system>/<model>/<scenario>/accuracy/   the same, accuracy.txt, the accuracy log
v6.1 (from v6.0): code/ is src/, and measurements.json, user.conf and README.md sit in the results scenario folder.

``<model>`` is the round's name of the benchmark (resnet50 at v2.0, resnet at v6.1). LoadGen's files are copied
as written; only the accuracy log is cut to the checker's 10 KiB as the official truncate_accuracy_log.py
does (first and last 4 KiB), its full hash kept in accuracy.txt.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.hashing import sha256_file
from mlrepro.core.job import Job
from mlrepro.core.minis import mini_dir
from mlrepro.environment import system_desc
from mlrepro.inference import rounds

ACCURACY_LOG_LIMIT = 10 * 1024
_KEEP = 4 * 1024
PERF_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")
ACC_FILES = (*PERF_FILES, "accuracy.txt")


def truncate_accuracy_log(src: Path, dst: Path) -> None:
    data = src.read_bytes()
    if len(data) > ACCURACY_LOG_LIMIT:
        data = data[:_KEEP] + b"\n...\n" + data[-_KEEP:]
    dst.write_bytes(data)


def measurements(benchmark: str, record: dict[str, Any]) -> dict[str, Any]:
    """The fields the checker requires of the measurements JSON."""
    return {
        "input_data_types": "fp32",
        "retraining": "no",
        "starting_weights_filename": f"checkpoint.pt of training run {record['checkpoint']['run']} "
                                     f"(sha256 {record['checkpoint']['sha256']})",
        "weight_data_types": "fp32",
        "weight_transformations": "none",
    }


def _network_cards() -> str:
    """Physical network interfaces of this host (/sys/class/net less loopback and virtual ones)."""
    net = Path("/sys/class/net")
    cards = [p for p in net.iterdir() if (p / "device").exists()] if net.is_dir() else []
    return str(len(cards))


def system_json(rnd: rounds.Round, desc: dict[str, Any], served: dict[str, set[str]]) -> dict[str, Any]:
    desc = dict(desc)
    if desc["status"] not in ("available", "preview", "rdi"):  # training's "research" is inference's rdi
        desc["status"] = "rdi"
    desc["system_type"] = rnd.system_type(served)
    added = {"host_network_card_count": _network_cards(),
             "system_type_detail": (f"one node, {desc['accelerators_per_node']} accelerator(s) "
                                    f"({desc['accelerator_model_name']}); mlrepro's mini models")}
    desc.update({k: added[k] for k in rnd.system_fields})
    return desc


def _served(runs_dir: Path, rnd: rounds.Round) -> dict[str, set[str]]:
    """package model -> the scenarios run, from ``runs_dir/<benchmark>/<scenario>/``."""
    return {rnd.model(b.name): {s.name for s in b.iterdir() if s.is_dir()}
            for b in sorted(runs_dir.iterdir()) if b.is_dir()}


def readme(model: str, benchmark: str, scenario: str, rnd: rounds.Round, shortened: bool) -> str:
    return (f"# {model} {scenario}\n\nMLPerf Inference {rnd.name}. Run by `snakemake` (mlrepro): its "
            f"`inference_run` rule, `mlrepro/inference/run.py` (benchmark {benchmark}, scenario {scenario}, modes "
            "performance and accuracy).\n"
            + ("mlperf.conf holds the round's values LoadGen was given (through user.conf, the seeds set by hand); "
               if rnd.conf_text is not None else "")
            + "the detail logs record every effective setting.\n"
            + ("\n**Shortened settings: not submittable.**\n" if shortened else ""))


def add_audit_tests(tests_dir: Path, dest: Path, round_name: str) -> None:
    """The audit tests of one (benchmark, scenario) (``tests_dir/<test>/compliance/<TEST0x>/``, as the round's
    run_verification.py wrote them: mlrepro/inference/audit_tests.py) into ``dest``, the folder the round's checker
    reads them from. TEST01's accuracy log is cut as truncate_accuracy_log.py cuts it in compliance folders, the
    full log's hash appended to its accuracy.txt (which it creates where the test has none)."""
    for test in sorted(p for p in tests_dir.iterdir() if p.is_dir()):
        record = json.loads((test / "result.json").read_text())
        if record.get("round") != round_name:  # another round's test: its audit.config and verification differ
            raise ValueError(f"{test / 'result.json'}: audit test of inference round {record.get('round')}, the "
                             f"package declares {round_name}; run it again")
        for folder in sorted(p for p in (test / "compliance").iterdir() if p.is_dir()):
            shutil.copytree(folder, dest / folder.name)
            log = folder / "accuracy" / "mlperf_log_accuracy.json"
            if log.is_file():
                truncate_accuracy_log(log, dest / folder.name / "accuracy" / log.name)
                with (dest / folder.name / "accuracy" / "accuracy.txt").open("a") as f:
                    f.write(f"hash={sha256_file(log)}\n")


def build(runs_dir: Path, user_confs: dict[str, Path], out: Path, org: str, division: str, status: str,
          system: str, device: str, threads: int, round_name: str = rounds.DEFAULT,
          audits_dir: Path | None = None) -> None:
    """``runs_dir/<benchmark>/<scenario>/<mode>/`` -> the package under ``out`` (built atomically), with the audit
    tests of ``audits_dir/<benchmark>/<scenario>/`` where given."""
    rnd = rounds.get(round_name)
    served = _served(runs_dir, rnd)
    with atomic.atomic_dir(out) as tmp:
        root = tmp / division / org
        desc = system_desc.describe(org, division, status, system, threads, device)
        atomic.write_json(root / "systems" / f"{system}.json", system_json(rnd, desc, served))
        for bench_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
            benchmark = bench_dir.name
            model = rnd.model(benchmark)
            code = root / rnd.code_dir / model
            code.mkdir(parents=True)
            shutil.copy2(mini_dir(benchmark) / "model.py", code / "model.py")
            (code / "README.md").write_text(f"mlrepro's mini {benchmark} ({model}): minis/{benchmark}/model.py, "
                                            "served by mlrepro/inference/serve.py through mlperf_loadgen.\n")
            for scen_dir in sorted(p for p in bench_dir.iterdir() if p.is_dir()):
                scenario = scen_dir.name
                perf, acc = scen_dir / "performance", scen_dir / "accuracy"
                record = json.loads((perf / "result.json").read_text())
                if record.get("round") != rnd.name:  # its seeds and minimums are another round's
                    raise ValueError(f"{perf / 'result.json'}: run for inference round {record.get('round')}, "
                                     f"the package declares {rnd.name}; run it again")
                res = root / "results" / system / model / scenario
                (res / "performance" / "run_1").mkdir(parents=True)
                (res / "accuracy").mkdir(parents=True)
                for name in PERF_FILES:
                    shutil.copy2(perf / name, res / "performance" / "run_1" / name)
                for name in ACC_FILES:
                    shutil.copy2(acc / name, res / "accuracy" / name)
                truncate_accuracy_log(acc / "mlperf_log_accuracy.json", res / "accuracy" / "mlperf_log_accuracy.json")
                if rnd.results_hold_measurements:
                    meas, meas_json = res, res / "measurements.json"
                else:
                    meas = root / "measurements" / system / model / scenario
                    meas_json = meas / f"{system}_{scenario}.json"
                    meas.mkdir(parents=True)
                    (meas / "mlperf.conf").write_text(rnd.conf())
                atomic.write_json(meas_json, measurements(benchmark, record))
                shutil.copy2(user_confs[benchmark], meas / "user.conf")
                if audits_dir is not None and (audits_dir / benchmark / scenario).is_dir():
                    add_audit_tests(audits_dir / benchmark / scenario, res if rnd.audits and rnd.audits.in_results
                                    else root / "compliance" / system / model / scenario, rnd.name)
                (meas / "README.md").write_text(readme(model, benchmark, scenario, rnd, bool(record.get("shortened"))))


def job(job: Job) -> None:
    """rules/inference.smk inference_package: params runs_dir (<outdir>/inference/runs), confs ({benchmark:
    user.conf}), org, division, status, system, device, threads, round."""
    p = job.params
    try:
        build(Path(p["runs_dir"]), {b: Path(c) for b, c in p["confs"].items()}, job.output.first, p["org"],
              p["division"], p["status"], p["system"], p["device"], int(p["threads"]), p["round"],
              Path(p["audits_dir"]) if p.get("audits_dir") else None)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
