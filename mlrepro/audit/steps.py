"""The audit's two steps, ``check`` (every result file through the compliance engine) and ``summarize`` (verdicts,
RCPs, scores, the report), as rules/audit.smk's jobs and ``python -m mlrepro.audit`` run them: one :class:`Step`.

A step judged by another mlperf-logging release (``logging``) re-runs itself in an interpreter isolated under it
(``python -m mlrepro.audit`` with :meth:`Step.argv`; mlrepro/core/versions.py); ``compare_logging`` audits the
package a second time under another release and lists where the verdicts differ.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mlrepro.audit import compare, discover
from mlrepro.core import releases, versions
from mlrepro.core.errors import MlreproError
from mlrepro.core.job import Job


class StepError(MlreproError, ValueError):
    """An audit step that cannot start as asked (names the option and what to do)."""


@dataclass(frozen=True)
class Step:
    step: str  # check or summarize
    root: Path  # the package: one organisation or a round
    out: Path  # the audit's output folder
    ruleset: str
    usage: str = "training"
    jobs: int = 1  # worker processes of the check (and of a release's own tools)
    max_file_mb: float = discover.DEFAULT_MAX_FILE_MB  # a larger entry is not read; it gets its own verdict
    logging: Path | None = None  # the release that judges: one version's folder, or a folder of them by tag
    compare_logging: str | None = None  # summarize: a second release (a folder as logging, or "installed")
    fast: bool = True  # the engine's fast paths (mlrepro/audit/fastpath.py); False: the checker as it ships
    manifest_sha256: str | None = None  # the provenance manifest's sha256 as the package's report published it
    result_ids: Path | None = None  # the round's published result IDs (CSV: org,system,id)

    def argv(self) -> list[str]:
        """This step as ``python -m mlrepro.audit`` arguments."""
        options = {"--root": self.root, "--out": self.out, "--usage": self.usage, "--ruleset": self.ruleset,
                   "--max-file-mb": repr(self.max_file_mb), "--jobs": self.jobs, "--logging": self.logging,
                   "--compare-logging": self.compare_logging, "--manifest-sha256": self.manifest_sha256,
                   "--result-ids": self.result_ids}
        return [self.step, *(a for k, v in options.items() if v is not None for a in (k, str(v))),
                *([] if self.fast else ["--no-fast-paths"])]


def run(step: Step) -> int:
    """Run ``step``; its exit status."""
    compare_after = step.step == "summarize" and step.compare_logging is not None
    if step.logging is not None:
        try:
            folder = versions.resolve(step.logging, step.ruleset)
        except versions.VersionError as e:
            raise StepError(str(e)) from None
        if not versions.isolated(folder):  # this interpreter never imports the version: a child does
            releases.checked(folder)  # a cached release of the table: verified before its use
            status = versions.run_isolated(folder, ["-m", "mlrepro.audit", *step.argv()])
            return status or (_compare(step) if compare_after else 0)
        compare_after = False  # the isolated child: its parent compares once it is done
    # The official tools log every line they check; the audit reports their findings instead.
    logging.basicConfig(level=logging.ERROR)
    max_bytes = int(step.max_file_mb * (1 << 20))
    # imported only here: under logging, in the isolated interpreter, they load that version;
    # the check step imports the compliance engine alone (check.py)
    if step.step == "check":
        from mlrepro.audit import check

        versions.assert_isolated()
        doc = check.check_round(step.root, step.out / "checks.json", step.out / ".cache", step.usage, step.ruleset,
                                step.jobs, max_bytes, step.fast)
        print(f"audit: {len(doc['files'])} result files, {len(doc['checked'])} checked, the rest from the cache")
        return 0
    from mlrepro.audit import pipeline, report, result_ids

    versions.assert_isolated()
    try:
        audit = pipeline.summarize(step.root, pipeline.load_json(step.out / "checks.json"), step.usage,
                                   step.ruleset, step.manifest_sha256, step.result_ids, max_bytes, step.jobs, step.fast,
                                   versions.later_releases(step.logging, step.ruleset) if step.logging else [])
    except result_ids.PublishedTableError as e:
        raise StepError(str(e)) from None
    audit["rules_changed"] = compare.PAGE if step.compare_logging is not None else None
    pipeline.write_summary(audit, step.out)
    report.write(audit, step.out / "report")
    print(f"audit: report in {step.out / 'report' / 'index.html'}")
    return _compare(step) if compare_after else 0


def _compare(step: Step) -> int:
    """Audit the same package under the ``compare_logging`` release into OUT/compare, then list the results whose
    verdicts differ (``compare``); the exit status of the first step that fails."""
    other = step.out / "compare"
    judge = None if step.compare_logging == "installed" else Path(str(step.compare_logging))
    for name in ("check", "summarize"):
        again = Step(name, step.root, other, step.ruleset, step.usage, step.jobs, step.max_file_mb, judge)
        status = subprocess.run([sys.executable, "-P", "-m", "mlrepro.audit", *again.argv()], check=False).returncode
        if status:
            return status
    diffs = compare.write(step.out / "audit.json", other / "audit.json", step.out, step.out / "report")
    print(f"audit: {len(diffs)} results judged differently by the second release ({step.out / 'rules_changed.csv'})")
    return 0


def _job_step(job: Job, name: str) -> Step:
    """rules/audit.smk: params root, out, usage, ruleset, max_file_mb, logging, fast; summarize: compare_logging,
    manifest_sha256, input result_ids; the check's workers: its threads."""
    p = job.params
    return Step(name, Path(p["root"]), Path(p["out"]), p["ruleset"], p["usage"], job.threads, float(p["max_file_mb"]),
                Path(p["logging"]) if p["logging"] else None, p.get("compare_logging"), bool(p["fast"]),
                p.get("manifest_sha256"), job.input.get("result_ids"))


def check_job(job: Job) -> None:
    sys.exit(run(_job_step(job, "check")))


def summarize_job(job: Job) -> None:
    sys.exit(run(_job_step(job, "summarize")))
