"""``python -m tests.slurm_snakemake ARGS``: ``snakemake ARGS`` with the Slurm executor plugin's status checks at
most SECONDS apart, for the tests on CI's local cluster (tests/test_slurm.py: SNAKEMAKE).

Why: after each status check in which no job ended, the plugin (2.8.0, ``Executor.check_active_jobs``) waits 10 s
longer for the next one, up to 180 s, whatever ``--seconds-between-status-checks`` says: made for a shared
cluster's queue and jobs of hours. The test cluster's jobs take seconds, and each stage of a pipeline waited up to
half a minute (measured: 8 s after the data jobs and 14 s after the runs, in a 117 s pipeline) for the check that
saw its jobs end. Only when the plugin looks changes: what it asks (squeue, sacct), how it reads each job's state
and what it reports are its own, as a submitter's ``snakemake --profile profiles/slurm`` runs them.
"""

from __future__ import annotations

import runpy
from collections.abc import AsyncGenerator
from typing import Any

from snakemake_executor_plugin_slurm import Executor

SECONDS = 2  # the tests' --seconds-between-status-checks (tests/test_slurm.py: POLL)

_check_active_jobs = Executor.check_active_jobs


async def _check_with_cap(self: Executor, active_jobs: list[Any]) -> AsyncGenerator[Any, None]:
    async for job in _check_active_jobs(self, active_jobs):
        yield job
    # the plugin has set its next wait (it grows while no job ends): at most SECONDS
    self.next_seconds_between_status_checks = min(self.next_seconds_between_status_checks, SECONDS)


Executor.check_active_jobs = _check_with_cap  # type: ignore[method-assign]

if __name__ == "__main__":  # as ``python -m snakemake``: its documented entry point, not its internals
    runpy.run_module("snakemake", run_name="__main__", alter_sys=True)
