"""What is checked before the training pipeline's jobs, what is done when they start, and the ``repair`` target.

Planning only reads. Snakemake parses the Snakefile the same way for a run, ``-n``, ``--summary``, ``--dag``,
``--list-rules`` and ``--lint``, and again in a job's own process on a cluster: nothing here runs while it
parses. :class:`Preparation` is an input function of the entry rules (``all``, ``datasets``, ``data``, ``run``):
while the DAG is built it checks once and either refuses (:class:`PlanningError`: the files and what to do,
exit status 1, no traceback) or, for ``all``, names the files to make again; it never writes. In order:

1. finished results against the sha256 their runs recorded: a mismatch refuses;
2. files a killed job or a user removed (a run's result, a step's output): ``all`` asks for them by name, so
   that Snakemake makes them again and, after them, what depends on them (it does not re-make a missing
   intermediate file whose consumers are up to date on its own);
3. a submission package that differs from what the package step wrote, a generated dataset that no longer
   matches its manifest: planning refuses, naming ``snakemake repair``, whose job (:func:`repair_job`) says each
   change it makes (``snakemake repair -n`` lists them) and makes them: it removes the package's verdict and
   the report (rebuilt from the verified results) and regenerates the dataset in place (deterministic: its
   manifest keeps its time stamp when the files match it again, so nothing downstream re-runs);
4. datasets to download by hand, prepared datasets whose files changed since they were verified: refused
   (``snakemake verify_data``, which builds none of the entry rules, hashes them again).

:meth:`Preparation.before_jobs` runs from ``onstart``, which Snakemake calls in the process that schedules the
jobs of a real run, once the DAG is built and before the first job (never for ``-n``, ``--summary``, ``--dag``,
``--lint``, nor in a job's own process, to which it passes ``--no-hooks``): this output folder's lock
(mlrepro/core/outdir_lock.py), then the receipts of generated datasets whose stamps changed while their files still
match (a copied folder). Each (system, benchmark)'s launch file is a job's output (rules/runs.smk ``launch``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snakemake.logging import logger as log

from mlrepro.core import integrity, outdir_lock
from mlrepro.core.job import Job
from mlrepro.datasets import fetch, manifest, stamps
from mlrepro.datasets import recipe as data_recipe
from mlrepro.planning.plan import Plan

# Set by before_jobs in the scheduling process and inherited by its jobs: a job's own Snakemake process (on a
# cluster node) builds the DAG of its job again, and the scheduling process has already checked it.
SCHEDULED_ENV = "MLREPRO_SCHEDULED"


class PlanningError(SystemExit):
    """What stops planning (a config, a result or a dataset to fix first): Python prints the message as it is and
    exits with status 1; Snakemake passes a SystemExit through its input functions, without a traceback."""

    def __init__(self, message: str) -> None:
        super().__init__(f"error: {message}")
        self.message = message


@dataclass(frozen=True)
class Repair:
    """One change the ``repair`` target makes: ``what`` says it; ``remove`` or ``regenerate`` (a generated dataset
    made again in place: benchmark, folder, params, seed, receipt) does it. JSON values: the job's params."""

    what: str
    remove: tuple[str, ...] = ()
    regenerate: dict[str, Any] | None = None


@dataclass
class Preparation:
    plan: Plan
    _again: list[Path] | None = None  # what `all` asks for again, once checked
    _repairs: list[Repair] | None = None
    _receipts: list[tuple[Path, Path]] = field(default_factory=list)  # (receipt, folder) to refresh

    def __call__(self, wildcards: Any = None) -> list[str]:
        """The input function of the entry rules but ``all``: checks (once) while the DAG is built."""
        self.check()
        return []

    def again(self, wildcards: Any = None) -> list[str]:
        """The input function of ``all``: checks, and names the removed files to make again."""
        return [str(p) for p in self.check()]

    def check(self) -> list[Path]:
        if self._again is None:
            self._again = [] if os.environ.get(SCHEDULED_ENV) else self._check()
        return self._again

    def _check(self) -> list[Path]:
        self._check_results()
        again = self._removed()
        repairs = self.repairs()
        if repairs:
            raise PlanningError("the output folder needs repairs before a run:\n"
                                + "\n".join(f"  {r.what}" for r in repairs)
                                + "\nRun `snakemake repair` to make them (`snakemake repair -n` lists them), then "
                                  "run again.")
        self._check_datasets()
        for m in again:
            log.warning(f"{m}: missing; it is made again, and what depends on it")
        return again

    def before_jobs(self) -> None:
        """From ``onstart``: the lock, then the receipts to refresh."""
        try:
            outdir_lock.acquire(self.plan.out.root)
        except outdir_lock.OutdirLocked as e:
            raise PlanningError(str(e)) from None
        os.environ[SCHEDULED_ENV] = "1"
        for receipt, folder in self._receipts:
            stamps.write_receipt(receipt, folder)

    def _check_results(self) -> None:
        out = self.plan.out
        tampered = [problem for s, b in self.plan.ordered_units for i in self.plan.run_indices(b)
                    if out.summary(s, b, i).exists() and out.result(s, b, i).exists()
                    and (problem := integrity.result_problem(out.result(s, b, i)))]
        if tampered:
            raise PlanningError("finished results do not match the sha256 their runs recorded:\n"
                                + "\n".join(f"  {p}" for p in tampered)
                                + "\nRestore them from a copy, or delete their run folders to run those runs again.")

    def _removed(self) -> list[Path]:
        # A removed result is run again, and so is a step whose outputs a killed job left missing (Snakemake
        # removes a job's old outputs before it runs it).
        out = self.plan.out
        missing: list[Path] = []
        for s, b in self.plan.ordered_units:
            for i in self.plan.run_indices(b):
                if not out.summary(s, b, i).exists():
                    if out.verdict(s, b, i).exists():  # finished once, then removed
                        missing.append(out.summary(s, b, i))
                elif not out.result(s, b, i).exists():
                    missing.append(out.result(s, b, i))
        if out.report.exists():
            missing += [f for f in [out.environment, out.scores, out.package_verdict, out.submission,
                                    *self.plan.all_runs(out.verdict)] if not f.exists()]
        return missing

    def repairs(self) -> list[Repair]:
        """What the ``repair`` target changes (read once: hashing the package and the datasets)."""
        if self._repairs is None:
            self._repairs = self._package_repairs() + [r for b in self.plan.ordered_benchmarks
                                                       if (r := self._dataset_repair(b))]
        return self._repairs

    def _package_repairs(self) -> list[Repair]:
        # Snakemake does not re-make a changed file inside a directory output, and --forcerun cannot be set
        # from the Snakefile: the package's verdict and the report (both derived) are removed instead.
        out = self.plan.out
        if not out.package_verdict.exists():
            return []
        recorded = json.loads(out.package_verdict.read_text(encoding="utf-8")).get("files")
        changed = integrity.tree_problems(out.submission, recorded) if recorded is not None else []
        if not changed:
            return []
        removed = tuple(str(p) for p in (out.package_verdict, out.report) if p.exists())
        shown = "; ".join(changed[:20]) + (f"; and {len(changed) - 20} more" if len(changed) > 20 else "")
        return [Repair(f"the submission package differs from what the package step wrote ({shown}): remove "
                       f"{' and '.join(removed)}, so that it is rebuilt from the verified results", removed)]

    def _dataset_repair(self, benchmark: str) -> Repair | None:
        # Only a changed stamp costs a hash; the generator (torch) is imported only to regenerate.
        if self.plan.data_choice(benchmark).kind != "generated" or not self.plan.generated_manifest(benchmark).exists():
            return None  # never generated: the data rule makes it
        folder = self.plan.out.generated_data(benchmark)
        receipt = self.plan.dataset_receipts(benchmark)[0]
        if receipt.exists() and not stamps.changed_files(stamps.read_receipt(receipt)):
            return None
        if problems := manifest.verify(folder):
            files = "; ".join(f"{p.file}: {p.problem}" for p in problems[:5])
            return Repair(f"dataset {folder} no longer matches its manifest ({files}): regenerate it in place",
                          regenerate={"benchmark": benchmark, "folder": str(folder), "receipt": str(receipt),
                                      "params": self.plan.data_spec(benchmark),
                                      "seed": self.plan.config["data_seed"]})
        self._receipts.append((receipt, folder))
        return None

    def _check_datasets(self) -> None:
        plan = self.plan
        changed: list[stamps.Problem] = []
        manual: list[str] = []
        for b in plan.ordered_benchmarks:
            kind = plan.data_choice(b).kind
            if kind == "generated":
                continue  # checked with the repairs
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
        if manual:
            raise PlanningError("datasets to download by hand:\n" + "\n".join(manual))
        if changed:
            lines = "\n".join(f"  {p}" for p in changed)
            raise PlanningError(
                f"prepared dataset files changed since they were verified:\n{lines}\n"
                "Run `snakemake verify_data` to hash them again: it names every file that no longer matches "
                "its manifest and accepts those that still do. A dataset that really changed must be prepared "
                f"again (delete its receipts in {plan.out.receipts}/<benchmark>/ and, for a recipe, its folder "
                f"in {plan.data_root}/).")


def repair_job(job: Job) -> None:
    """The ``repair`` target's job: make each change of its params' repairs (:meth:`Preparation.repairs`), and say
    it."""
    for r in job.params["repairs"]:
        for p in r["remove"]:
            Path(p).unlink(missing_ok=True)
        if (again := r["regenerate"]) is not None:
            from mlrepro.datasets import generated

            generated.rebuild(again["benchmark"], Path(again["folder"]), again["params"], again["seed"])
            stamps.write_receipt(Path(again["receipt"]), Path(again["folder"]))
        print(f"done: {r['what']}")
    if not job.params["repairs"]:
        print("nothing to repair")
