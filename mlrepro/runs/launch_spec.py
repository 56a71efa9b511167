"""How every run of a benchmark is launched: the file ``mlrepro.runs.driver --launch`` reads.

One type for its three writers (the pipeline's ``launch`` rule, the reproduce stage, the tests), so that a
field cannot be spelled differently in one of them. What a run computes from (config, hyperparameters,
implementation files) is also in the run rule's ``computes`` digest; the other fields are pipeline keys
(folders, mounts, threads) that may change without making a finished run stale.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrepro.core import atomic, untrusted_dir
from mlrepro.core.errors import MlreproError
from mlrepro.core.job import Job


class LaunchSpecError(MlreproError, ValueError):
    """A launch file that is not a launch spec (names the file and the key)."""


@dataclass(frozen=True)
class LaunchSpec:
    benchmark: str
    kind: str  # "mini" (ours) or a vendor implementation's kind
    name: str
    folder: str  # the folder whose run_and_time.sh runs
    config_file: str
    env: dict[str, str]
    params: dict[str, Any]
    data_dir: str
    submission: dict[str, Any]
    gpus: int = 0
    threads: int = 1
    nodes: int = 1
    tasks_per_node: int = 1
    device: str = "cpu"
    drop_caches: bool = False
    # container engines only: where the run script, the data and the logs are inside the image
    script_in_container: str | None = None
    data_mount: str | None = None
    log_mount: str | None = None
    # container engines only: a host folder holding the run's code, mounted read-only at its own path, and the run
    # started in ``folder`` there (reproduce: the package's staged copy); None: the code is in the image
    code: str | None = None
    # a folder with its own run.sub (mlrepro/runs/runsub.py): one run is one experiment of it in the run's
    # allocation, with the variables the config gives it; its ready image (CONT) where the config names one
    run_sub: str | None = None
    runsub_env: dict[str, str] = dataclasses.field(default_factory=dict)
    container: str | None = None
    allocation: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "launch spec") -> LaunchSpec:
        if not isinstance(data, dict):
            raise LaunchSpecError(f"{source}: not a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        if unknown := sorted(data.keys() - known):
            raise LaunchSpecError(f"{source}: unknown keys {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        if missing := sorted(required - data.keys()):
            raise LaunchSpecError(f"{source}: missing keys {', '.join(missing)}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str, source: str = "launch spec") -> LaunchSpec:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise LaunchSpecError(f"{source}: not JSON ({e})") from None
        return cls.from_dict(data, source)

    def write(self, path: Path) -> None:
        """Write atomically; an unchanged file keeps its bytes and time stamp."""
        text = self.to_json()
        if not (path.is_file() and untrusted_dir.record_problem(path.lstat()) is None
                and path.read_text(encoding="utf-8") == text):
            atomic.write_text(path, text)

    @classmethod
    def read(cls, path: Path) -> LaunchSpec:
        """A launch file this user wrote (mlrepro/core/untrusted_dir.py read_record); LaunchSpecError naming why
        another is not trusted: it says what runs."""
        try:
            data = untrusted_dir.read_record(Path(path), 16 << 20)
        except untrusted_dir.PlantedLink as e:
            raise LaunchSpecError(str(e)) from None
        return cls.from_json(data.decode("utf-8", errors="replace"), str(path))


def launch_file_job(job: Job) -> None:
    """The launch rule's job (rules/runs.smk): its params' spec, checked, to its launch file."""
    out = job.output.first
    LaunchSpec.from_dict(job.params["spec"], f"the launch spec of {out}").write(out)
    print(f"{out}: written")
