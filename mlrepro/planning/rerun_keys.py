"""Snakemake's rerun keys: what the rules put in tracked params so that a job runs again exactly when what it computes
from changes.

Snakemake records a job's params and runs it again when one differs (its ``params`` trigger). How a rule file gives a
param decides whether it is tracked:

- a value, or a function of the wildcards only (``lambda w: ...``): evaluated while the DAG is built, recorded,
  compared at the next invocation: tracked;
- a function that also takes ``input`` (or ``output``) (``lambda w, input: ...``): evaluated once the job's inputs
  exist, before it runs: not tracked.

What a config file exports is read from its capture record (mlrepro/planning/captures.py), which a job writes: a value
made of it (a launch spec, the package's or the report's spec) raises FileNotFoundError while the DAG is built, which
Snakemake shows as ``<TBD>`` and asks again before the job runs. Such a value is never a tracked param: Snakemake
records a tracked param as it was while the DAG was built, ``<TBD>``, for a job it has records of (9.14 to 9.27:
Persistence._params is cached per job), and would run the job again at the next invocation. It travels in an untracked
param; what is tracked beside it is known while the DAG is built: the record's name (what it captured: the record is
the job's input) and :meth:`RerunKeys.basis`, the value as it would be for stand-in records.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mlrepro.containers.context import context_digest, folder_files
from mlrepro.planning.captures import Captures
from mlrepro.planning.what_runs import Unit, WhatRuns


def sha256_of(value: Any) -> str:
    """A text's sha256, or that of JSON's text of any other value (keys sorted)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class RerunKeys:
    runs: WhatRuns
    captures: Captures
    # the plan with every config file captured as exporting nothing (mlrepro.planning.captures.StandInCaptures)
    stand_in: Callable[[], Any] = field(compare=False, repr=False)
    _digests: dict[Unit | Any, str] = field(init=False, default_factory=dict, compare=False, repr=False)

    @cached_property
    def _stand_in(self) -> Any:
        return self.stand_in()

    def basis(self, value: Callable[[Any], Any]) -> str:
        """The sha256 of ``value(plan)`` (a text, or JSON's text of it) as it would be were every config file captured
        as exporting nothing: what the rules track of a value read from capture records, which are its jobs' inputs (a
        record is named by what it captured). Known while the DAG is built, and changed with whatever else the value
        is made of."""
        return sha256_of(value(self._stand_in))

    def launch_digest(self, system: str, benchmark: str) -> str:
        """What a run computes from: captured config, hyperparameters, every file it executes
        (Implementation.digest, mlrepro/runs/executed_code.py). Not runs, image name, implementation path
        or mounts (pipeline keys: changing them keeps finished runs). Once per unit, not per job; a folder's
        files once for all the systems that run it."""
        unit = (system, benchmark)
        if unit not in self._digests:
            impl = self.runs.units[unit].implementation
            if impl.folder not in self._digests:
                self._digests[impl.folder] = impl.digest(self.captures.folder_digest(impl.folder))
            # the captured config by its record's name: what the capture read (its variables are known only later)
            self._digests[unit] = sha256_of({"capture": self.captures.keys[unit],
                                             "params": self.runs.units[unit].params,
                                             "files": self._digests[impl.folder]})
        return self._digests[unit]

    def build_context(self, image: str) -> str:
        """The content of an image's build context, so that an edit rebuilds even where time stamps do not tell
        (Snakemake skips an input that is only newer when its checksum is unchanged); none with locked images."""
        if self.runs.config["images"] == "locked":
            return ""
        if folder := self.runs.image_folder(image):
            return context_digest(image, folder, folder_files(folder))
        return context_digest(image, self.runs.repo)
