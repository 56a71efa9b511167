# Before any job: this output folder's lock, then the finished results and the package checked
# against the hashes recorded when they were written (mlrepro/core/integrity.py). Snakemake itself judges
# outputs by time stamps only, so an edited result would otherwise be gated, packaged and scored.
from mlrepro.core import integrity, outdir_lock
from mlrepro.core.smk import dry_run

_DRYRUN = dry_run(workflow)

# Only the process that schedules jobs holds the lock (not a dry run, nor the Snakemake processes
# that run single jobs); the kernel releases it when that process ends, even when it is killed.
if workflow.is_main_process and not _DRYRUN:
    try:
        outdir_lock.acquire(OUT)
    except outdir_lock.OutdirLocked as _e:
        raise WorkflowError(str(_e)) from None

# The checks run where jobs are scheduled; the Snakemake processes that run one job each (run:
# blocks, cluster jobs) parse this file too and must not act on them again.
_tampered = []
_missing = []
for _b in BENCHMARKS if workflow.is_main_process else []:
    for _i in run_indices(_b):
        _run_dir = OUT / "runs" / _b / str(_i)
        if not (_run_dir / "run.json").exists():
            if (OUT / "compliance" / _b / f"{_i}.json").exists():  # finished once, then removed
                _missing.append(_run_dir / "run.json")
            continue
        if not (_run_dir / "result.txt").exists():
            _missing.append(_run_dir / "result.txt")
        elif _problem := integrity.result_problem(_run_dir / "result.txt"):
            _tampered.append(_problem)
if _tampered:
    raise WorkflowError("finished results do not match the sha256 their runs recorded:\n"
                        + "\n".join(f"  {p}" for p in _tampered)
                        + "\nRestore them from a copy, or delete their run folders to run those runs again.")

# A removed result is run again, and so is a step whose outputs a killed job left missing (Snakemake
# removes a job's old outputs before it runs it). Snakemake does not re-make a missing intermediate
# file whose consumers are up to date: the report (the final output, re-made from what is there)
# is removed so that the DAG goes through the missing files again.
if REPORT.exists():
    _missing += [f for f in [INFO / "environment.json", OUT / "scores.json", OUT / "package_check.json",
                             OUT / "submission",
                             *all_runs(OUT / "compliance" / "{benchmark}" / "{run}.json")] if not Path(f).exists()]
for _m in _missing:
    logger.warning(f"{_m}: missing; {'a run without --dry-run' if _DRYRUN else 'this run'} runs it again")
if _missing and not _DRYRUN:
    REPORT.unlink(missing_ok=True)

# A package that differs from what the package step wrote is rebuilt from the verified results, and
# the report after it. Snakemake does not re-make a changed file inside a directory output, nor a
# missing intermediate file whose consumers are up to date, and --forcerun cannot be set from here:
# the package's verdict and the report (both derived, both re-made) are removed instead.
_package_verdict = OUT / "package_check.json"
if workflow.is_main_process and _package_verdict.exists():
    _recorded = json.loads(_package_verdict.read_text()).get("files")
    _changed = integrity.tree_problems(OUT / "submission", _recorded) if _recorded is not None else []
    for _p in _changed:
        logger.warning(f"submission package: {_p}")
    if _changed and _DRYRUN:
        logger.warning("the submission package will be rebuilt by a run without --dry-run")
    elif _changed:
        logger.warning("the submission package differs from what the package step wrote: rebuilding it")
        _package_verdict.unlink()
        REPORT.unlink(missing_ok=True)
