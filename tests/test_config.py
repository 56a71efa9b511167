"""Configuration errors are caught before any job starts, naming the key."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from mlrepro import config
from tests.conftest import REPO


def _default() -> dict[str, Any]:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.mark.parametrize(("change", "expected"), [
    ({"benchmarks": {"gpt3": {}}}, "benchmarks.gpt3: no implementation of 'gpt3'"),
    ({"benchmarks": {"resnet": {"runs": 0}}}, "benchmarks.resnet.runs: 0 is less than the minimum of 1"),
    ({"benchmarks": {"resnet": {"runs": 3}}}, "benchmarks.resnet.runs: 3 runs, but training 2.0.0 requires exactly 5"),
    ({"ruleset": "9.9.9"}, "ruleset: unknown ruleset '9.9.9'"),
    ({"ruleset": "4.1.0"}, "benchmarks.resnet: ruleset training 4.1.0 has no benchmark 'resnet'"),
    ({"benchmark": {}}, "(top level): Additional properties are not allowed ('benchmark' was unexpected)"),
    ({"benchmarks": {"resnet": {"lrr": 0.1}}}, "benchmarks.resnet: Additional properties are not allowed ('lrr'"),
    ({"benchmarks": {"resnet": {"data": {"classes": "ten"}}}}, "benchmarks.resnet.data.classes: 'ten' is not of type"),
    ({"telemetry": {"hz": 0}}, "telemetry.hz: 0 is less than the minimum of 0.1"),
    ({"only": ["bert"], "benchmarks": {"resnet": {}}}, "only: bert not among the configured benchmarks"),
])
def test_bad_config_names_the_key(change: dict[str, Any], expected: str) -> None:
    raw = _default()
    raw.update(change)
    with pytest.raises(config.ConfigError) as err:
        config.load(raw, "config.yaml")
    assert expected in str(err.value)


def test_defaults_merge_and_runs_follow_the_ruleset() -> None:
    raw = _default()
    raw["benchmarks"] = {"resnet": {"lr": 0.05}}
    loaded, benchmarks = config.load(raw)
    assert benchmarks["resnet"].params["lr"] == 0.05
    assert benchmarks["resnet"].params["momentum"] == 0.9  # from minis/resnet/defaults.yaml
    assert benchmarks["resnet"].runs == 5 and config.submittable(benchmarks)
    assert loaded["telemetry"] == {"enabled": True, "hz": 10}


def test_fewer_runs_only_with_the_switch_and_then_not_submittable() -> None:
    raw = _default()
    raw.update(allow_fewer_runs=True, benchmarks={"resnet": {"runs": 2}})
    _, benchmarks = config.load(raw)
    assert benchmarks["resnet"].runs == 2 and not config.submittable(benchmarks)


def test_runs_to_run_launches_more_than_the_package_holds() -> None:
    raw = _default()
    raw["benchmarks"] = {"resnet": {"runs_to_run": 7}}
    _, benchmarks = config.load(raw)
    assert (benchmarks["resnet"].runs, benchmarks["resnet"].runs_to_run) == (5, 7) and config.submittable(benchmarks)
    raw["benchmarks"] = {"resnet": {"runs_to_run": 4}}
    with pytest.raises(config.ConfigError, match=r"benchmarks.resnet.runs_to_run: 4, fewer than the 5 runs"):
        config.load(raw, "config.yaml")
    raw["benchmarks"] = {"resnet": {"runs": 6}}  # more runs than a package holds: runs_to_run says how
    with pytest.raises(config.ConfigError, match=r"more than the 5 a submission holds; set runs_to_run"):
        config.load({**raw, "allow_fewer_runs": True}, "config.yaml")


def test_run_seeds_are_distinct_and_stable() -> None:
    seeds = [config.run_seed(0, "unet3d", i) for i in range(40)]
    assert len(set(seeds)) == 40
    assert seeds == [config.run_seed(0, "unet3d", i) for i in range(40)]
    assert config.run_seed(1, "unet3d", 0) != seeds[0]
