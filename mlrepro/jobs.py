"""The one seam between the rules and the code. Each rule ends in ``script: "dispatch.py"`` (rules/dispatch.py),
which hands Snakemake's ``snakemake`` object to :func:`run`; ``run`` makes it a :class:`~mlrepro.core.job.Job`
(named files, params, wildcards, threads, log), finds the rule's entry function in :data:`ENTRIES` and calls it.

Logging is done here, once for every job: the job's stdout and stderr, at the file-descriptor level so that the
processes it starts write there too, go to its log (``log[0]``); a failure leaves its traceback (or, for the
project's own errors, its one line) there and puts the log's end, or why it is empty (a full disk:
``mlrepro.core.joblog.explain``), on Snakemake's stderr, with a non-zero exit.

The jobs of :data:`WARM` are handed to this Snakemake invocation's warm parent for their module, which imported
torch once and runs the function in a forked child (mlrepro/runs/warm.py). The run rule's job runs here: its
driver imports no torch, and only the training it starts goes warm.

``python -m mlrepro.jobs < JOB`` runs one job (its JSON, on standard input) in this interpreter with this process's
stdio and exits with its status: what a step that judges with another mlperf-logging release runs in the interpreter
isolated under it (mlrepro/core/versions.py), and what the tests run where a job must have a process of its own
(LoadGen).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from mlrepro.core.job import Files, Job, call, json_values
from mlrepro.runs import warm

# rule -> its entry function, "package.module:function", called with the Job
ENTRIES: dict[str, str] = {
    "container_image": "mlrepro.containers.jobs:image_job",
    "lock_images": "mlrepro.containers.jobs:lock_job",
    "image_bundle": "mlrepro.containers.jobs:bundle_job",
    "sqsh_import": "mlrepro.containers.sqsh:job",
    "environment": "mlrepro.environment.record:job",
    "data": "mlrepro.datasets.generated:job",
    **{f"data_{step}": "mlrepro.datasets.steps:job" for step in ("download", "verify", "extract", "prepare")},
    "data_path": "mlrepro.datasets.steps:adopt_job",
    "verify_data": "mlrepro.datasets.stamps:verify_job",
    "repair": "mlrepro.planning.prepare:repair_job",
    "capture": "mlrepro.runs.capture_job:job",
    "launch": "mlrepro.runs.launch_spec:launch_file_job",
    "launch_preview": "mlrepro.runs.preview:job",
    "run": "mlrepro.runs.driver:job",
    "judging_release": "mlrepro.core.releases:job",
    "compliance": "mlrepro.gate.compliance:job",
    "package": "mlrepro.package.assemble:job",
    "score": "mlrepro.score:job",
    "report": "mlrepro.report.submission:job",
    "inference_conf": "mlrepro.inference.settings:job",
    "inference_run": "mlrepro.inference.run:job",
    "inference_audit_test": "mlrepro.inference.run:audit_job",
    "inference_package": "mlrepro.inference.package:job",
    "inference_check": "mlrepro.inference.check:job",
    "inference_report": "mlrepro.inference.report:job",
    "audit_check": "mlrepro.audit.steps:check_job",
    "audit_summarize": "mlrepro.audit.steps:summarize_job",
    "inference_audit": "mlrepro.inference.audit:job",
    "inference_preview": "mlrepro.inference.vendor.preview:job",
    "vendor_work": "mlrepro.inference.vendor.jobs:work_job",
    **{f"vendor_{step}": "mlrepro.inference.vendor.jobs:step_job" for step in (
        "image", "build", "data", "engines", "run", "stage", "audit", "compliance", "truncate", "export")},
    "vendor_report": "mlrepro.inference.vendor.jobs:report_job",
    "vendor_package": "mlrepro.inference.vendor.package:package_job",
    "vendor_check": "mlrepro.inference.vendor.package:check_job",
    **{f"reproduce_{step}": f"mlrepro.reproduce.steps:{step}_job"
       for step in ("verify", "plan", "stage", "image", "data", "report")},
}
# rule -> the module whose warm parent runs it (mlrepro/runs/warm.py: standard library only at import)
# (not reproduce_data: the generator it runs is the reproduced package's, never this one's)
WARM: dict[str, str] = {"data": warm.DATA, "inference_run": warm.INFERENCE, "inference_audit_test": warm.INFERENCE}
# Rules whose log is what the user asked for (an audit, verify_data, a reproduction's verdict): on success it goes to
# the terminal too.
SHOWN = frozenset({"repair", "launch_preview", "verify_data", "audit_check", "audit_summarize", "inference_audit",
                   "reproduce_report", "inference_preview"})
SHOWN_BYTES = 16 << 10


def from_snakemake(smk: Any) -> Job:
    """The Job of Snakemake's ``snakemake`` object (its documented attributes only: input, output, params,
    wildcards, threads, log, rule)."""
    return Job(rule=smk.rule, input=_files(smk.input), output=_files(smk.output),
               params=json_values(dict(smk.params.items())), wildcards={k: str(v) for k, v in smk.wildcards.items()},
               threads=int(smk.threads), log=str(smk.log[0]) if len(smk.log) else None)


def _files(named: Any) -> Files:
    return Files(tuple(str(p) for p in named),
                 {k: (str(v) if isinstance(v, str) else [str(p) for p in v]) for k, v in named.items()})


def run(smk: Any) -> None:
    """Run the job Snakemake hands the dispatcher; exit non-zero where it fails."""
    _isolate_path()
    job = from_snakemake(smk)
    entry = _entry(job.rule)
    with _logged(job.log) as terminal:
        status = None
        if job.rule in WARM:
            status = warm.hand_over_job(WARM[job.rule], entry, job.to_json())
        if status is None:
            try:
                status = call(entry, job)
            except OSError:  # its error could not be written to its log (a full disk): explain says why below
                status = 1
    if job.log and (status or job.rule in SHOWN):
        from mlrepro.core.joblog import explain, tail

        text = explain(Path(job.log), status) if status else tail(Path(job.log), SHOWN_BYTES)
        os.write(terminal[1 if status else 0], text.encode("utf-8", "replace"))
    if status:
        sys.exit(status)


class _logged:
    """The job's stdout and stderr (fds 1 and 2, so its child processes' too) into ``log``, started empty and opened
    for appending (a step that writes its own lines there, such as an image build, adds to it); the terminal's two
    kept apart for after the job (``as``: their descriptors)."""

    def __init__(self, log: str | None) -> None:
        self.log = log
        self.saved = (os.dup(1), os.dup(2))

    def __enter__(self) -> tuple[int, int]:
        if self.log:
            # made anew, not truncated: a symlink or hard link left at its name is replaced, never written through
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.log)
            fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW, 0o644)
            self._flush()
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
            for stream in (sys.stdout, sys.stderr):  # a job's lines reach its log as they are printed
                stream.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
        return self.saved

    def __exit__(self, *_: object) -> None:
        self._flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)

    @staticmethod
    def _flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()


def _isolate_path() -> None:
    """Python's ``-P`` for the script Snakemake runs: neither the script's folder (Snakemake's .snakemake/scripts)
    nor the working folder (which the main process may have on its path) stays on sys.path, so that a folder there
    named like a module (an audited organisation called ``mlrepro``) is never imported."""
    here = {os.path.realpath(os.getcwd()), os.path.realpath(os.path.dirname(os.path.abspath(sys.argv[0] or ".")))}
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) not in here]


def main(argv: list[str] | None = None) -> None:
    if sys.argv[1:] if argv is None else argv:
        sys.exit("usage: python -m mlrepro.jobs < JOB (a job's JSON on standard input: mlrepro/core/job.py)")
    job = Job.from_json(sys.stdin.read())
    sys.exit(call(_entry(job.rule), job))


def _entry(rule: str) -> str:
    if rule not in ENTRIES:
        sys.exit(f"mlrepro.jobs: rule {rule} has no entry function in ENTRIES (mlrepro/jobs.py)")
    return ENTRIES[rule]


if __name__ == "__main__":
    main()
