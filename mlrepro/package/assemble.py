"""Assemble the MLCommons submission tree and judge it with the official package checker.

Layout (training_policies, "Submission"):
``<org>/systems/<system>.json`` (one per system), ``<org>/results/<system>/<benchmark>/result_<i>.txt``,
``<org>/benchmarks/<benchmark>/implementations/<implementation>/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlrepro import PACKAGE_ROOT, PROJECT_ROOT
from mlrepro.core import atomic, integrity, median_window, names, releases, rulesets
from mlrepro.core.job import Job
from mlrepro.package import provenance

SUCCESS = "PACKAGE CHECKER FOUND NO ERRORS"
IMAGE_RECORD = "image.json"  # in the implementation's folder of the package: the image its runs used


@dataclass
class PackageVerdict:
    folder: str
    usage: str
    ruleset: str
    valid: bool
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    submittable: bool = True
    judged_by: str = ""  # the mlperf-logging release whose package checker judged


def _copy_implementation(benchmark: str, impl: dict, dest: Path) -> None:
    """What ran: a vendor's folder as it is; ours, its folder with the shared training code and image."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    if impl["kind"] != "mini":
        shutil.copytree(impl["folder"], dest, ignore=ignore, symlinks=True)
    else:
        shutil.copytree(impl["folder"], dest / "minis" / benchmark, ignore=ignore)
        shutil.copytree(PACKAGE_ROOT / "mlrepro", dest / "mlrepro", ignore=ignore)
        image_dir = names.inside(PROJECT_ROOT / "containers", impl["image"])  # never a folder outside containers/
        if image_dir.is_dir():
            shutil.copytree(image_dir, dest / "containers" / impl["image"], ignore=ignore)
        for name in ("pyproject.toml", "requirements.txt"):
            shutil.copy2(PROJECT_ROOT / name, dest / name)
        (dest / "README.md").write_text(
            f"# {benchmark}: mlrepro mini implementation\n\n"
            f"`minis/{benchmark}/` is the implementation folder (model.py, {impl['config_file']}, "
            f"run_and_time.sh);\n`mlrepro/training/loop.py` is the training loop shared by every benchmark. "
            f"The image is built from\n`containers/{impl['image']}/Dockerfile` with this folder as context.\n"
        )
    if impl.get("image_record"):
        record = json.loads(Path(impl["image_record"]).read_text())
        keep = ("image", "tag", "id", "repo_digests", "base_images", "build_args", "dockerfile_sha256",
                "context_sha256", "engine")
        (dest / IMAGE_RECORD).write_text(json.dumps({k: record.get(k) for k in keep}, indent=2) + "\n")


def system_descriptions(probed: dict[str, Any], systems: dict[str, dict[str, Any]],
                        ruleset: str | None = None) -> dict[str, dict[str, Any]]:
    """Each system's description: the probed host's (mlrepro.environment.system_desc), named for the system,
    with its node count, its status as ``ruleset`` words it, and the fields its config sets by hand
    (systems.<name>.description)."""
    descs = {}
    status = {"status": rulesets.system_status(probed["status"], ruleset)} if ruleset and "status" in probed else {}
    for name, system in systems.items():
        nodes = int(system["nodes"])
        networking = {"host_networking": "N/A (single node)"} if nodes == 1 else \
            {"host_networking": "Ethernet (Slurm cluster)", "host_networking_topology": "Slurm cluster"}
        descs[name] = {**probed, **status, **networking, "system_name": name, "number_of_nodes": str(nodes),
                       **system["description"]}
    return descs


def assemble(out: Path, org: str, system_descs: dict[str, dict[str, Any]], runs: dict[str, dict[str, list[Path]]],
             implementations: dict[str, dict], ruleset: str) -> Path:
    """Write the tree for ``runs`` (system -> benchmark -> result files in run order) under ``out/org``."""
    root = out / org
    (root / "systems").mkdir(parents=True)
    for system, desc in system_descs.items():
        (root / "systems" / f"{system}.json").write_text(json.dumps(desc, indent=2) + "\n")
    for system, benchmarks in runs.items():
        for benchmark, files in benchmarks.items():
            folder = root / "results" / system / benchmark
            folder.mkdir(parents=True)
            for i, path in enumerate(files):
                shutil.copy2(path, folder / rulesets.result_filename(benchmark, i, ruleset))
    for benchmark in {b for benchmarks in runs.values() for b in benchmarks}:  # one folder for every system's runs
        impl = implementations[benchmark]
        _copy_implementation(benchmark, impl, root / "benchmarks" / benchmark / "implementations" / impl["name"])
    return root


def chosen_runs(launched: dict[str, dict[str, list[Path]]], keep: dict[str, int]
                ) -> tuple[dict[str, dict[str, list[Path]]], dict[str, dict[str, Any]]]:
    """The runs the package holds: of more runs than a benchmark keeps, the median window in time order
    (mlrepro/core/median_window.py); and each such choice's record (system -> benchmark -> selection)."""
    from mlrepro.core.olympic import olympic_mean

    runs: dict[str, dict[str, list[Path]]] = {}
    selections: dict[str, dict[str, Any]] = {}
    for system, benchmarks in launched.items():
        for benchmark, files in benchmarks.items():
            n = keep.get(benchmark, len(files))
            if len(files) <= n:
                runs.setdefault(system, {})[benchmark] = files
                continue
            # keyed by run folder: the ledger's and the provenance manifest's name of a run
            by_dir = {f.parent.name: f for f in files}
            chosen = median_window.choose([median_window.window_run(name, f) for name, f in by_dir.items()], n,
                                          lambda minutes, b=benchmark: olympic_mean(b, minutes).minutes)
            runs.setdefault(system, {})[benchmark] = [by_dir[k] for k in chosen["chosen_keys"]]
            selections.setdefault(system, {})[benchmark] = chosen
    return runs, selections


def check(org_dir: Path, usage: str, ruleset: str, release: Path | None = None) -> PackageVerdict:
    """Run ``python -m mlperf_logging.package_checker`` (of ``release``'s folder, else the installed one) and print
    its output (the package job's log); it always exits 0, so read its output."""
    releases.checked(release)  # a cached release: verified before its use
    env = None if release is None else {**os.environ, "PYTHONPATH": str(release), "PYTHONNOUSERSITE": "1",
                                        "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory(prefix="package-checker-") as scratch:  # its own log file, not kept
        proc = subprocess.run(
            [sys.executable, "-P", "-m", "mlperf_logging.package_checker", str(org_dir), usage, ruleset,
             "--log_output", str(Path(scratch) / "checker.log")],
            capture_output=True, text=True, check=False, env=env,
        )
    output = proc.stdout + proc.stderr
    print(output, end="", flush=True)
    errors = [line for line in output.splitlines() if re.match(r"(ERROR|CRITICAL)\b", line)]
    if proc.returncode != 0:
        errors.append(f"package checker exited with status {proc.returncode} (crash):\n{output[-2000:]}")
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    valid = SUCCESS in output and not errors
    if not valid and not errors:
        errors.append("package checker did not report success")
    return PackageVerdict(str(org_dir), usage, ruleset, valid, errors, warnings, judged_by=_release_label(release))


def _release_label(release: Path | None) -> str:
    """The release that judged, as its folder says it (pip's dist-info, else the folder's name: its tag)."""
    if release is None:
        from importlib.metadata import version

        return version("mlperf-logging")
    from mlrepro.core.versions import describe

    return describe(release).label


def job(job: Job) -> None:
    """rules/package.smk: input environment (its system_desc, the probed host, underlies every system's JSON),
    params spec (org, usage, ruleset, submittable, systems, runs, keep, implementations, provenance: the plan's
    package spec) and release (the judging release's folder; none: the installed one); output tree and verdict."""
    spec = job.params["spec"]
    out, release = job.output["tree"], Path(job.params["release"]) if job.params["release"] else None
    descs = system_descriptions(json.loads(job.input["environment"].read_text())["system_desc"], spec["systems"],
                                spec["ruleset"])
    launched = {s: {b: [Path(f) for f in files] for b, files in benchmarks.items()}
                for s, benchmarks in spec["runs"].items()}
    # only results that match the hashes their runs recorded are packaged (and chosen from)
    integrity.verify_results(f for benchmarks in launched.values() for files in benchmarks.values() for f in files)
    runs, selections = chosen_runs(launched, spec.get("keep") or {})
    spec = {**spec, "runs": {s: {b: [str(f) for f in files] for b, files in benchmarks.items()}
                             for s, benchmarks in runs.items()}, "selections": selections}
    with atomic.atomic_dir(out) as tmp:
        org_dir = assemble(tmp, spec["org"], descs, runs, spec["implementations"], spec["ruleset"])
        if spec.get("provenance"):  # written before the check, so that the checker judges the package with it
            provenance.write_for_package(org_dir, spec, spec["provenance"])
        verdict = check(org_dir, spec["usage"], spec["ruleset"], release)
        manifest_sha256 = provenance.write_for_package(org_dir, spec, spec["provenance"]) \
            if spec.get("provenance") else None  # again: the checker may have added files
        verdict.folder = str(out / spec["org"])
        verdict.submittable = bool(spec["submittable"])
        if not verdict.valid and verdict.submittable:
            errors = "\n".join(f"  {e}" for e in verdict.errors)
            sys.exit(f"error: the submission package {out / spec['org']} fails the official package "
                     f"checker ({spec['usage']} {spec['ruleset']}, mlperf-logging {verdict.judged_by}):\n{errors}\n"
                     f"Full output: {job.log}")
        files = integrity.tree_hashes(tmp)  # what later steps verify the package against
    atomic.write_json(job.output["verdict"], {**asdict(verdict), "manifest_sha256": manifest_sha256, "files": files})
