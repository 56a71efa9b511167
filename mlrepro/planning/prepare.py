"""What is checked, and what is done, before the training pipeline's jobs: one place, one set of guards.

Snakemake parses the Snakefile the same way for a run, ``-n``, ``--summary``, ``--dag``, ``--list-rules`` and
``--lint``, and again in each job's own process: nothing here runs while it parses. :func:`prepare` runs
from an input function of the entry rules (``all``, ``datasets``, ``data``, ``run``), that is while the DAG
is built, and from ``onstart``; it checks in every invocation that builds a DAG and acts (lock, repair)
only when Snakemake executes jobs for real (mlrepro.core.smk.executes_jobs), in the process that schedules
them (a job's own Snakemake process on a cluster node only names itself the warm-start owner):

1. this output folder's lock (mlrepro/core/outdir_lock.py), before anything is changed; then each
   (system, benchmark)'s launch spec (mlrepro/runs/launch_spec.py), rewritten where it changed;
2. finished results against the sha256 their runs recorded: a mismatch stops the pipeline;
3. files a killed job or a user removed: the report (the final output) is removed, so that the DAG goes
   through them again (Snakemake does not re-make a missing intermediate file whose consumers are up to date);
4. a submission package that differs from what the package step wrote: its verdict and the report are
   removed, so that it is rebuilt from the verified results;
5. a generated dataset that no longer matches its manifest is regenerated in place (deterministic: the
   manifest keeps its time stamp when the files match it again, so nothing downstream re-runs); prepared
   datasets whose files changed since they were verified stop the pipeline (``snakemake verify_data``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger as log

from mlrepro.core import integrity, outdir_lock, smk
from mlrepro.datasets import fetch, manifest, stamps
from mlrepro.datasets import recipe as data_recipe
from mlrepro.planning.plan import Plan
from mlrepro.runs import warm

VERIFY_DATA = "verify_data"  # the rule that hashes every dataset again (rules/data.smk)


class PlanningError(WorkflowError):
    """What stops the pipeline before its first job (a config, a result or a dataset to fix first)."""


@dataclass
class Preparation:
    plan: Plan
    workflow: Any
    _done: set[str] = field(default_factory=set)

    def __call__(self, wildcards: Any = None) -> list[str]:
        """An input function (no inputs): prepares once per mode, while the DAG is built."""
        self.prepare()
        return []

    def prepare(self) -> None:
        acts = smk.executes_jobs(self.workflow)
        mode = "act" if acts else "check"
        if mode in self._done:
            return
        self._done.add(mode)
        if acts:
            self._warm_start_owner()
        if not self.workflow.is_main_process:
            return  # a job's own Snakemake process: the scheduling process checked and repaired
        if acts:
            try:
                outdir_lock.acquire(self.plan.out.root)
            except outdir_lock.OutdirLocked as e:
                raise PlanningError(str(e)) from None
            self._write_launches()
        self._check_results(acts)
        self._check_package(acts)
        self._check_datasets(acts)

    def _warm_start_owner(self) -> None:
        # The warm parent, if any, serves this process (and this host; on a cluster, each job's own Snakemake
        # process) only and exits with it. In the environment the jobs inherit, not in a rule's params:
        # turning it off or on keeps finished runs.
        if self.plan.native and self.plan.config["warm_start"]:
            os.environ[warm.OWNER_ENV] = warm.owner_here()
        else:
            os.environ.pop(warm.OWNER_ENV, None)

    def _write_launches(self) -> None:
        # How every run of a benchmark is launched, pipeline keys included; read by each run (its params name
        # the file). Not a job's output: see mlrepro/planning/inputs.py. Unchanged files keep their time stamp.
        for s, b in self.plan.ordered_units:
            self.plan.launch_spec(s, b).write(self.plan.out.launch(s, b))

    def _check_results(self, acts: bool) -> None:
        out = self.plan.out
        tampered: list[str] = []
        missing: list[Path] = []
        for s, b in self.plan.ordered_units:
            for i in self.plan.run_indices(b):
                if not out.summary(s, b, i).exists():
                    if out.verdict(s, b, i).exists():  # finished once, then removed
                        missing.append(out.summary(s, b, i))
                    continue
                if not out.result(s, b, i).exists():
                    missing.append(out.result(s, b, i))
                elif problem := integrity.result_problem(out.result(s, b, i)):
                    tampered.append(problem)
        if tampered:
            raise PlanningError("finished results do not match the sha256 their runs recorded:\n"
                                + "\n".join(f"  {p}" for p in tampered)
                                + "\nRestore them from a copy, or delete their run folders to run those runs again.")
        # A removed result is run again, and so is a step whose outputs a killed job left missing (Snakemake
        # removes a job's old outputs before it runs it).
        if out.report.exists():
            missing += [f for f in [out.environment, out.scores, out.package_verdict, out.submission,
                                    *self.plan.all_runs(out.verdict)] if not f.exists()]
        for m in missing:
            log.warning(f"{m}: missing; {'this run' if acts else 'a run without --dry-run'} runs it again")
        if missing and acts:
            out.report.unlink(missing_ok=True)

    def _check_package(self, acts: bool) -> None:
        # Snakemake does not re-make a changed file inside a directory output, and --forcerun cannot be set
        # from the Snakefile: the package's verdict and the report (both derived) are removed instead.
        out = self.plan.out
        if not out.package_verdict.exists():
            return
        recorded = json.loads(out.package_verdict.read_text(encoding="utf-8")).get("files")
        changed = integrity.tree_problems(out.submission, recorded) if recorded is not None else []
        for p in changed:
            log.warning(f"submission package: {p}")
        if changed and not acts:
            log.warning("the submission package will be rebuilt by a run without --dry-run")
        elif changed:
            log.warning("the submission package differs from what the package step wrote: rebuilding it")
            out.package_verdict.unlink()
            out.report.unlink(missing_ok=True)

    def _check_datasets(self, acts: bool) -> None:
        plan = self.plan
        changed: list[stamps.Problem] = []
        manual: list[str] = []
        for b in plan.ordered_benchmarks:
            kind = plan.data_choice(b).kind
            if kind == "generated":
                self._repair_generated(b, acts)
                continue
            for receipt in plan.dataset_receipts(b):
                if receipt.exists():
                    changed += stamps.changed_files(stamps.read_receipt(receipt))
            if kind == "recipe" and not plan.out.receipt(b, "verify").exists():
                try:  # a recipe field that would become a path outside its folder stops planning, named
                    recipe = data_recipe.load(b, plan.recipe_file(b))
                except data_recipe.RecipeError as e:
                    raise PlanningError(str(e)) from None
                if message := fetch.manual_message(recipe, plan.data_root.resolve() / b / "downloads"):
                    manual.append(message)
        # `snakemake verify_data` looks at the files whose stamps changed instead of being stopped by them
        verifying = VERIFY_DATA in smk.targets(self.workflow)
        if manual and not verifying:
            raise PlanningError("datasets to download by hand:\n" + "\n".join(manual))
        if changed:
            lines = "\n".join(f"  {p}" for p in changed)
            if not verifying:
                raise PlanningError(
                    f"prepared dataset files changed since they were verified:\n{lines}\n"
                    "Run `snakemake verify_data` to hash them again: it names every file that no longer matches "
                    "its manifest and accepts those that still do. A dataset that really changed must be prepared "
                    f"again (delete its receipts in {plan.out.receipts}/<benchmark>/ and, for a recipe, its folder "
                    f"in {plan.data_root}/).")
            log.warning(f"files changed since they were verified (verify_data hashes them now):\n{lines}")

    def _repair_generated(self, benchmark: str, acts: bool) -> None:
        # Only a changed stamp costs a hash; the generator (torch) is imported only to regenerate.
        folder = self.plan.out.generated_data(benchmark)
        receipt = self.plan.dataset_receipts(benchmark)[0]
        if not self.plan.generated_manifest(benchmark).exists():
            return  # never generated: the data rule makes it
        if receipt.exists() and not stamps.changed_files(stamps.read_receipt(receipt)):
            return
        if problems := manifest.verify(folder):
            for p in problems:
                log.warning(f"dataset {folder}: {p.file}: {p.problem}")
            if not acts:
                log.warning(f"dataset {folder} will be regenerated by a run without --dry-run")
                return
            log.warning(f"dataset {folder}: regenerating it")
            from mlrepro.datasets import generated

            generated.rebuild(benchmark, folder, self.plan.benchmarks[benchmark].data_params,
                              self.plan.config["data_seed"])
        if acts:
            stamps.write_receipt(receipt, folder)
