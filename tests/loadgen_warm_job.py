"""A LoadGen job for tests/test_inference.py, forked from the warm parent that serves the pipeline's LoadGen jobs
(mlrepro/runs/warm.py, module mlrepro.inference.run), as the pipeline's dispatcher hands them over (mlrepro/jobs.py
``run``): each job is still a process of its own (LoadGen reads its settings once per process), but torch is imported
once per test session instead of once per job.

``python -P tests/loadgen_warm_job.py [ENTRY] < JOB``: the job (its JSON on standard input) run by ENTRY
("pkg.module:function"; by default its rule's, mlrepro/jobs.py ENTRIES) in a child of the warm parent of the owner
named by MLREPRO_WARM_OWNER, with this process's standard output and error; exits with its status. Where no parent
serves it, it fails, saying why (a test that meant to measure the warm path must not pass on the cold one).
"""

from __future__ import annotations

import sys

from mlrepro.core.job import Job
from mlrepro.jobs import ENTRIES
from mlrepro.runs import warm


def main(argv: list[str]) -> None:
    job = Job.from_json(sys.stdin.read())
    entry = argv[0] if argv else ENTRIES[job.rule]
    status = warm.hand_over_job(warm.INFERENCE, entry, job.to_json())
    if status is None:
        sys.exit(f"{sys.argv[0]}: no warm parent served {job.rule} (is {warm.OWNER_ENV} set to a live process?)")
    sys.exit(status)


if __name__ == "__main__":
    main(sys.argv[1:])
