"""Every error class of the project has the common base ``MlreproError``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import mlrepro
from mlrepro.core.errors import MlreproError

# Not errors: a BaseException that unwinds a terminated run (runs/ledger.py), and SystemExit, which ends
# Snakemake's parse with a message and no traceback (planning/prepare.py).
CONTROL_FLOW = {"mlrepro.runs.ledger.Terminated", "mlrepro.planning.prepare.PlanningError"}


def test_every_error_class_derives_from_the_common_base() -> None:
    classes = {}
    for info in pkgutil.walk_packages(mlrepro.__path__, "mlrepro."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and issubclass(cls, BaseException):
                classes[f"{cls.__module__}.{cls.__qualname__}"] = cls
    assert len(classes) > 35
    strays = sorted(name for name, cls in classes.items() if not issubclass(cls, MlreproError)
                    and name not in CONTROL_FLOW)
    assert not strays, strays
