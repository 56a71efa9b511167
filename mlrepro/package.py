"""Assemble the MLCommons submission tree and judge it with the official package checker.

Layout (training_policies, "Submission"):
``<org>/systems/<system>.json``, ``<org>/results/<system>/<benchmark>/result_<i>.txt``,
``<org>/benchmarks/<benchmark>/implementations/<implementation>/``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlrepro import PROJECT_ROOT, atomic, integrity, paths, rulesets

SUCCESS = "PACKAGE CHECKER FOUND NO ERRORS"
IMPLEMENTATION = "mlrepro-pytorch"


@dataclass
class PackageVerdict:
    folder: str
    usage: str
    ruleset: str
    valid: bool
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    submittable: bool = True


def _copy_implementation(benchmark: str, image: str, dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(PROJECT_ROOT / "workflows" / benchmark, dest / "workflow", ignore=ignore)
    shutil.copytree(PROJECT_ROOT / "mlrepro", dest / "mlrepro", ignore=ignore)
    container = paths.inside(PROJECT_ROOT / "containers", image)  # never a folder outside containers/
    if container.is_dir():
        shutil.copytree(container, dest / "container", ignore=ignore)
    for name in ("pyproject.toml", "requirements.txt"):
        shutil.copy2(PROJECT_ROOT / name, dest / name)
    (dest / "README.md").write_text(
        f"# {benchmark}: mlrepro mini implementation\n\n"
        f"`workflow/model.py` is the model and its data generator; `mlrepro/train.py` is the training\n"
        f"loop shared by every benchmark. Reproduce a run with\n"
        f"`python -m mlrepro.train --benchmark {benchmark} ...` (see the pipeline's Snakefile).\n"
    )


def assemble(out: Path, org: str, system: str, system_desc: dict, runs: dict[str, list[Path]],
             images: dict[str, str], ruleset: str) -> Path:
    """Write the tree for ``runs`` (benchmark -> result files in run order) under ``out/org``."""
    root = out / org
    (root / "systems").mkdir(parents=True)
    (root / "systems" / f"{system}.json").write_text(json.dumps(system_desc, indent=2) + "\n")
    for benchmark, files in runs.items():
        folder = root / "results" / system / benchmark
        folder.mkdir(parents=True)
        for i, path in enumerate(files):
            shutil.copy2(path, folder / rulesets.result_filename(benchmark, i, ruleset))
        _copy_implementation(benchmark, images[benchmark],
                             root / "benchmarks" / benchmark / "implementations" / IMPLEMENTATION)
    return root


def check(org_dir: Path, usage: str, ruleset: str, log: Path) -> PackageVerdict:
    """Run ``python -m mlperf_logging.package_checker``; it always exits 0, so read its output."""
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_logging.package_checker", str(org_dir), usage, ruleset,
         "--log_output", str(log.with_suffix(".checker.log"))],
        capture_output=True, text=True, check=False,
    )
    output = proc.stdout + proc.stderr
    log.write_text(output)
    log.with_suffix(".checker.log").unlink(missing_ok=True)
    errors = [line for line in output.splitlines() if re.match(r"(ERROR|CRITICAL)\b", line)]
    if proc.returncode != 0:
        errors.append(f"package checker exited with status {proc.returncode} (crash):\n{output[-2000:]}")
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    valid = SUCCESS in output and not errors
    if not valid and not errors:
        errors.append("package checker did not report success")
    return PackageVerdict(str(org_dir), usage, ruleset, valid, errors, warnings)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.package", description=__doc__)
    p.add_argument("--spec", type=Path, required=True, help="JSON: org, system, usage, ruleset, submittable, "
                   "system_desc, runs {benchmark: [result files]}, images {benchmark: image}")
    p.add_argument("--out", type=Path, required=True, help="the submission folder to write")
    p.add_argument("--verdict", type=Path, required=True)
    p.add_argument("--log", type=Path, required=True)
    args = p.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    runs = {b: [Path(f) for f in files] for b, files in spec["runs"].items()}
    try:  # only results that match the hashes their runs recorded are packaged
        integrity.verify_results(f for files in runs.values() for f in files)
    except integrity.Tampered as e:
        sys.exit(f"error: {e}")
    with atomic.atomic_dir(args.out) as tmp:
        org_dir = assemble(tmp, spec["org"], spec["system"], spec["system_desc"], runs, spec["images"],
                           spec["ruleset"])
        verdict = check(org_dir, spec["usage"], spec["ruleset"], args.log)
        verdict.folder = str(args.out / spec["org"])
        verdict.submittable = bool(spec["submittable"])
        if not verdict.valid and verdict.submittable:
            errors = "\n".join(f"  {e}" for e in verdict.errors)
            sys.exit(f"error: the submission package {args.out / spec['org']} fails the official package "
                     f"checker ({spec['usage']} {spec['ruleset']}):\n{errors}\nFull output: {args.log}")
        files = integrity.tree_hashes(tmp)  # what later steps verify the package against
    atomic.write_json(args.verdict, {**asdict(verdict), "files": files})


if __name__ == "__main__":
    main()
