"""The inference submission layout (v2.0 to v5.1) from the stage's LoadGen runs:

    <division>/<org>/systems/<system>.json
    <division>/<org>/code/<benchmark>/                        the served model's source, a README
    <division>/<org>/measurements/<system>/<benchmark>/<scenario>/   <system>_<scenario>.json, user.conf,
                                                                     mlperf.conf, README.md
    <division>/<org>/results/<system>/<benchmark>/<scenario>/performance/run_1/   LoadGen's summary and detail
    <division>/<org>/results/<system>/<benchmark>/<scenario>/accuracy/   the same, accuracy.txt, the accuracy log

LoadGen's files are copied as written; only the accuracy log is cut to the checker's 10 KiB as the
official truncate_accuracy_log.py does (first and last 4 KiB), its full hash kept in accuracy.txt.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.environment import system_desc
from mlrepro.inference import settings
from mlrepro.training.workload import workflow_dir

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
    """The fields the checker requires of ``<system>_<scenario>.json``."""
    return {
        "input_data_types": "fp32",
        "retraining": "no",
        "starting_weights_filename": f"checkpoint.pt of training run {record['checkpoint']['run']} "
                                     f"(sha256 {record['checkpoint']['sha256']})",
        "weight_data_types": "fp32",
        "weight_transformations": "none",
    }


def build(runs_dir: Path, user_confs: dict[str, Path], out: Path, org: str, division: str, status: str,
          system: str, device: str, threads: int) -> None:
    """``runs_dir/<benchmark>/<scenario>/<mode>/`` -> the package under ``out`` (built atomically)."""
    mlperf_conf = settings.builtin_mlperf_conf()
    with atomic.atomic_dir(out) as tmp:
        root = tmp / division / org
        desc = system_desc.describe(org, division, status, system, threads, device)
        if desc["status"] not in ("available", "preview", "rdi"):  # training's "research" is inference's rdi
            desc["status"] = "rdi"
        # SingleStream/MultiStream/Offline are the edge scenarios; DLRM is a datacenter-only benchmark
        served = {p.name for p in runs_dir.iterdir() if p.is_dir()}
        desc["system_type"] = "datacenter,edge" if "dlrm" in served else "edge"
        atomic.write_json(root / "systems" / f"{system}.json", desc)
        for bench_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
            benchmark = bench_dir.name
            model = settings.MODEL_NAMES[benchmark]
            code = root / "code" / model
            code.mkdir(parents=True)
            shutil.copy2(workflow_dir(benchmark) / "model.py", code / "model.py")
            (code / "README.md").write_text(f"mlrepro's mini {benchmark} ({model}): workflows/{benchmark}/model.py, "
                                            "served by mlrepro/inference/serve.py through mlperf_loadgen.\n")
            for scen_dir in sorted(p for p in bench_dir.iterdir() if p.is_dir()):
                scenario = scen_dir.name
                perf, acc = scen_dir / "performance", scen_dir / "accuracy"
                record = json.loads((perf / "result.json").read_text())
                res = root / "results" / system / model / scenario
                (res / "performance" / "run_1").mkdir(parents=True)
                (res / "accuracy").mkdir(parents=True)
                for name in PERF_FILES:
                    shutil.copy2(perf / name, res / "performance" / "run_1" / name)
                for name in ACC_FILES:
                    shutil.copy2(acc / name, res / "accuracy" / name)
                truncate_accuracy_log(acc / "mlperf_log_accuracy.json", res / "accuracy" / "mlperf_log_accuracy.json")
                meas = root / "measurements" / system / model / scenario
                meas.mkdir(parents=True)
                atomic.write_json(meas / f"{system}_{scenario}.json", measurements(benchmark, record))
                shutil.copy2(user_confs[benchmark], meas / "user.conf")
                (meas / "mlperf.conf").write_text(mlperf_conf)
                (meas / "README.md").write_text(
                    f"# {model} {scenario}\n\nRun by `snakemake` (mlrepro): `python -m mlrepro.inference.run "
                    f"--benchmark {benchmark} --scenario {scenario} --mode performance|accuracy`.\n"
                    "mlperf.conf is the copy compiled into the mlcommons-loadgen that ran it; the detail logs "
                    "record every effective setting.\n"
                    + ("\n**Shortened settings: not submittable.**\n" if record.get("shortened") else ""))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.inference.package", description=__doc__)
    p.add_argument("--runs-dir", type=Path, required=True)
    p.add_argument("--user-conf", nargs="+", required=True, help="BENCHMARK=PATH")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--org", required=True)
    p.add_argument("--division", required=True)
    p.add_argument("--status", required=True)
    p.add_argument("--system", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    confs = dict(item.split("=", 1) for item in args.user_conf)
    build(args.runs_dir, {k: Path(v) for k, v in confs.items()}, args.out, args.org, args.division, args.status,
          args.system, args.device, args.threads)


if __name__ == "__main__":
    main()
