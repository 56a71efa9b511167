"""The training pipeline's one planning step (called once, from the Snakefile).

``start`` reads the config into a :class:`~mlrepro.planning.plan.Plan` (paths, specs, launch specs: nothing is
read but the config, the implementation folders and the records their capture jobs wrote of config files, each
checked against the config: mlrepro.runs.implementation.unit_problems) and returns the :class:`Preparation` whose
checks the entry rules run while the DAG is built and whose ``before_jobs`` runs from ``onstart``
(mlrepro/planning/prepare.py).
A bad config stops it with :class:`PlanningError`: the message naming the key, no traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mlrepro import config as mlconfig
from mlrepro import systems as mlsystems
from mlrepro.core import smk
from mlrepro.datasets import recipe as data_recipe
from mlrepro.inference import rounds
from mlrepro.planning import inputs
from mlrepro.planning.plan import Plan
from mlrepro.planning.prepare import PlanningError, Preparation
from mlrepro.runs import capture, warm

__all__ = ["Plan", "PlanningError", "Preparation", "inputs", "start"]


def start(workflow: Any, config: dict[str, Any]) -> tuple[Plan, Preparation]:
    """The plan of this config, and its preparation; a bad config raises PlanningError naming the key."""
    # the first process to plan (Snakemake's main one) names system: auto; its jobs inherit the name
    os.environ.setdefault(mlconfig.SYSTEM_ENV, mlconfig.host_system_name())
    try:
        # benchmarks.<bm>.data: generated (the generator's block), recipe, {recipe: FILE} or {path: DIR}
        raw, choices = data_recipe.split_choices(config)
        source = "config/config.yaml and --config"
        full, benchmarks = mlconfig.load(raw, source=source, base_dir=Path.cwd())
        # a config file from the command line that is a template: refused unless allowed (docs/security.md)
        mlconfig.refuse_templates(smk.configfiles(),
                                  bool(full.get("allow_templates")))
        systems, units = mlsystems.load(full, benchmarks, Path.cwd(), source)
        if "inference" in full:  # every served benchmark is a model of the declared round, with a scenario
            inf = full["inference"]
            if inf["benchmarks"] == "all":  # those of ours the declared round has
                inf["benchmarks"] = rounds.get(inf["round"]).served_benchmarks()
            rounds.get(inf["round"]).served_scenarios(inf["benchmarks"], inf["scenarios"])
    except (mlconfig.ConfigError, data_recipe.RecipeError) as error:
        raise PlanningError(str(error)) from None
    except rounds.RoundError as error:
        raise PlanningError(f"invalid configuration: inference: {error}") from None
    plan = Plan(full, benchmarks, choices, systems, units, Path(workflow.basedir))
    try:  # what the captured config files say against the config (a record not written yet: its job checks)
        problems = plan.captures.problems()
    except capture.CaptureError as error:
        raise PlanningError(str(error)) from None
    if problems:
        raise PlanningError(f"invalid configuration ({source}):\n" + "\n".join(problems))
    # The warm parent, if any, serves this process (and this host; on a cluster, each job's own Snakemake
    # process, which parses too) only and exits with it. In the environment the jobs inherit, not in a rule's
    # params: turning it off or on keeps finished runs. Nothing starts it while planning (mlrepro/runs/warm.py).
    if plan.native and plan.config["warm_start"]:
        os.environ[warm.OWNER_ENV] = warm.owner_here()
    else:
        os.environ.pop(warm.OWNER_ENV, None)
    return plan, Preparation(plan)
