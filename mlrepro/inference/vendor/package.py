"""The vendor flow's submission in the declared round's layout, and the declared round's official checker on it.

``assemble`` (vendor_package): after the round's post-run targets (staging, compliance staging, truncation), the
package as NVIDIA's own ``check_submission_staging`` puts it together: the staged ``<division>/<submitter>/``
(``build/submission-staging`` from v4.1-style folders; v2.0-style folders stage into their own tree), with the
folder's ``code/`` and the systems/ JSONs of the systems that have results beside it (the staging scripts write
neither). Where the declared round (``inference.round``) reads the layout of v6.0 on, ``relayout`` rewrites it
and names each change; a staging already in that layout passes through unchanged. Links are not copied (a run
folder is hostile: nothing outside it enters the package).

``check`` (vendor_check): the official checker of the declared round from ``inference.mlcommons_inference`` (a
checkout, or an unpacked tarball, of mlcommons/inference at the round's tag), in whichever form that tree ships it
(``submission_checker/main.py`` from v5.x, ``submission_checker.py`` or v2.0's ``submission-checker.py``). Not the
vendor's ``check_submission``: it clones mlcommons/inference at run time, which clusters and CI cannot reach. The
checker writes into the folder it reads, so it reads a private copy.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.errors import MlreproError
from mlrepro.core.job import Job
from mlrepro.inference import rounds
from mlrepro.inference.vendor import relayout

STAGED = ("results", "compliance", "measurements")
_ERROR = re.compile(r"^\[[^\]]* ERROR\] (.*)$", re.M)  # the checkers' logging format, v2.0 to v6.1


class PackageError(MlreproError, ValueError):
    """The vendor flow's staging or the official checker is not where the flow needs it."""


def _no_links(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if Path(folder, n).is_symlink()]


def staging(workdir: Path, submitter: str) -> Path:
    """The folder holding ``<division>/<submitter>/`` as the round's staging left it."""
    for root in (workdir / "build" / "submission-staging", workdir.parent.parent):
        if any((root / division / submitter / "results").is_dir() for division in ("closed", "open")):
            return root
    raise PackageError(f"{workdir}: no staged results (build/submission-staging/closed/{submitter}/results, or "
                       f"results/ in the folder as v2.0-style update_results writes them): did vendor_stage run?")


def assemble(workdir: Path, submitter: str, round_name: str, out: Path) -> list[str]:
    """The package of ``workdir``'s staging in ``round_name``'s layout, written to ``out`` (a new folder); the
    changes the relayout made (none where the round reads the staging's layout)."""
    src = staging(workdir, submitter)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as tmp:
        flat = Path(tmp) / "staged"
        for org in sorted(p for p in src.glob(f"*/{submitter}") if p.is_dir() and not p.is_symlink()):
            dst = flat / org.relative_to(src)
            for name in STAGED:
                if (org / name).is_dir() and not (org / name).is_symlink():
                    shutil.copytree(org / name, dst / name, ignore=_no_links)
            if (workdir / "code").is_dir():
                shutil.copytree(workdir / "code", dst / "code", ignore=_no_links)
            systems = {p.name for p in (dst / "results").glob("*") if p.is_dir()}
            for name in sorted(systems):
                desc = workdir / "systems" / f"{name}.json"
                if desc.is_file() and not desc.is_symlink():
                    (dst / "systems").mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(desc, dst / "systems" / desc.name)
        built = Path(tmp) / "package"
        if rounds.get(round_name).results_hold_measurements:
            changes = relayout.to_results_layout(flat, built)
        else:
            flat.rename(built)
            changes = []
        if out.exists():
            shutil.rmtree(out)
        built.rename(out)
    return changes


def checker_argv(checkout: Path, package: Path, round_name: str, submitter: str, csv: Path) -> tuple[list[str], Path]:
    """The official checker's command line in the form ``checkout`` ships it, and the folder it runs in."""
    tools = checkout / "tools" / "submission"
    args = ["--input", str(package), "--version", round_name, "--submitter", submitter, "--csv", str(csv)]
    if (tools / "submission_checker" / "main.py").is_file():
        return [sys.executable, "-m", "submission_checker.main", *args], tools
    for script in ("submission_checker.py", "submission-checker.py"):
        if (tools / script).is_file():
            return [sys.executable, str(tools / script), *args], tools
    raise PackageError(f"inference.mlcommons_inference {checkout}: no official checker in tools/submission "
                       "(submission_checker/main.py, submission_checker.py or submission-checker.py): name a checkout "
                       "or an unpacked tarball of mlcommons/inference at the declared round's tag")


def check(package: Path, checkout: Path, round_name: str, submitter: str, work: Path) -> dict[str, Any]:
    """The official checker on a copy of ``package`` in ``work`` (which must not exist): its errors and its whole
    output."""
    copy = work / "package"
    shutil.copytree(package, copy, symlinks=True)
    argv, cwd = checker_argv(checkout, copy, round_name, submitter, work / "summary.csv")
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    output = proc.stdout + proc.stderr
    errors = [m.group(1).strip() for m in _ERROR.finditer(output)]
    return {"checker": str(checkout), "round": round_name, "argv": argv, "exit_status": proc.returncode,
            "errors": errors, "passed": proc.returncode == 0 and not errors, "output": output}


def package_job(job: Job) -> None:
    """vendor_package: params workdir, submitter, round; output the package folder (and relayout.txt in it)."""
    p = job.params
    out = Path(job.output.first)
    out.parent.mkdir(parents=True, exist_ok=True)
    changes = assemble(Path(p["workdir"]), str(p["submitter"]), str(p["round"]), out)
    print(f"{out}: {len(changes)} relayout change(s) for {p['round']}")


def check_job(job: Job) -> None:
    """vendor_check: input the package; params checkout, round, submitter; output check.json. A hard gate: the
    record is written either way, and the job fails when the checker reports an error."""
    p = job.params
    if not p.get("checkout"):
        raise PackageError("inference.mlcommons_inference is not set: the vendor flow's package is checked by the "
                           "declared round's official checker from a checkout of mlcommons/inference at its tag")
    out = Path(job.output.first)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as tmp:
        record = check(job.input.first, Path(p["checkout"]), str(p["round"]), str(p["submitter"]), Path(tmp) / "w")
    output = record.pop("output")
    print(output)  # the whole of it in the job's log; its end in the record
    record["output_tail"] = output[-20_000:]
    if not record["passed"]:
        rejected = out.with_name(out.stem + ".rejected.json")
        atomic.write_json(rejected, record)
        shown = "\n".join(e[:500] for e in record["errors"][:20])
        raise PackageError(f"the official {p['round']} checker ({p['checkout']}) rejects {job.input.first} (exit "
                           f"{record['exit_status']}, {len(record['errors'])} error(s); all in {rejected}):\n{shown}")
    atomic.write_json(out, record)
