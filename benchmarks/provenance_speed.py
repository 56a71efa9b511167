"""Provenance manifest creation and verification time on a package of the default pipeline's size.

The default configuration packages eight benchmarks with 90 result files and one implementation
folder each. This builds such a package (and the run folders the manifest reads) from the output of
one test-configuration run, copying its files, then times ``provenance.build`` + ``write`` and
``audit.manifest.verify``; it prints the median of several repetitions.

    python benchmarks/provenance_speed.py RESULTS_DIR   # RESULTS_DIR: outdir of `--configfile config/test.yaml`
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from mlrepro import PROJECT_ROOT
from mlrepro.audit import manifest
from mlrepro.core import rulesets
from mlrepro.package import provenance

RULESET = "2.0.0"


def fabricate(source: Path, dest: Path) -> tuple[Path, dict[str, list[str]]]:
    """A default-size package under ``dest``/submission/org and its run folders under ``dest``/runs."""
    org_src = next(p for p in (source / "submission").iterdir() if p.is_dir())
    system = next((org_src / "results").iterdir()).name
    runs_src = sorted((p for p in (source / "runs" / system / "resnet").iterdir() if p.is_dir()),
                      key=lambda p: int(p.name))
    org = dest / "submission" / "org"
    shutil.copytree(org_src / "systems", org / "systems")
    impl = next((org_src / "benchmarks" / "resnet" / "implementations").iterdir())
    runs: dict[str, list[str]] = {}
    for b in rulesets.SEED_ORDER:
        shutil.copytree(impl, org / "benchmarks" / b / "implementations" / impl.name)
        runs[b] = []
        for i in range(rulesets.required_runs(b)):
            src = runs_src[i % len(runs_src)]
            run_dir = dest / "runs" / system / b / str(i)
            run_dir.mkdir(parents=True)
            for name in ("result.txt", "run.json", "ledger.jsonl"):
                if (src / name).exists():
                    shutil.copy(src / name, run_dir / name)
            target = org / "results" / system / b / rulesets.result_filename(b, i, RULESET)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / "result.txt", target)
            runs[b].append(str(run_dir))
    return org, runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="the outdir of a test-configuration run")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        org, runs = fabricate(args.results.resolve(), Path(tmp))
        data = {b: str(args.results.resolve() / "data" / "resnet" / "MANIFEST.sha256") for b in runs}
        files = sum(1 for f in org.rglob("*") if f.is_file())
        size = sum(f.stat().st_size for f in org.rglob("*") if f.is_file())
        results = sum(len(v) for v in runs.values())
        make, check = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            doc = provenance.build(org, ruleset=RULESET, outdir=Path(tmp), config={}, config_hash="0" * 16,
                                   runs={next((org / "results").iterdir()).name: runs}, data_manifests=data,
                                   repo=PROJECT_ROOT)
            provenance.write(org, doc)
            make.append(time.perf_counter() - start)
            start = time.perf_counter()
            verdict = manifest.verify(org)
            check.append(time.perf_counter() - start)
            assert verdict.present and not [f for f in verdict.findings if f.kind.startswith(("file", "result"))]
    print(f"package: {results} result files, {files} files, {size / 2**20:.1f} MiB")
    print(f"manifest creation: median {statistics.median(make):.3f} s of {args.repeat} "
          f"(min {min(make):.3f}, max {max(make):.3f})")
    print(f"verification:      median {statistics.median(check):.3f} s of {args.repeat} "
          f"(min {min(check):.3f}, max {max(check):.3f})")


if __name__ == "__main__":
    main()
