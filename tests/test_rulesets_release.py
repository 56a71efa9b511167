"""The ruleset's benchmarks and run counts follow the judging release, read as data, equal to what that release's
own ``benchmark_meta`` says; the rules' table (drops, statuses) against the 6.0.0 tools."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlperf_logging import benchmark_meta

from mlrepro import config as mlconfig
from mlrepro import score
from mlrepro.core import rulesets
from tests.v60 import TAG, extract_release

V60 = ("llama31_8b", "dlrm_dcnv2", "flux1", "llama2_70b_lora", "llama31_405b", "gpt_oss_20b", "deepseekv3_671b")

# In an interpreter that sees the release alone: its own tables, its olympic mean, its system status options.
OFFICIAL = r'''
import json, sys
from mlperf_logging import benchmark_meta
from mlperf_logging.result_summarizer import result_summarizer
out = {"allowed": {r: benchmark_meta.get_allowed_benchmarks("training", r) for r in sys.argv[1:]},
       "counts": benchmark_meta.get_result_file_counts("training"),
       "olympic3": result_summarizer._compute_olympic_average([3.0, 1.0, 2.0], 0, 1),
       "olympic3_one_failed": result_summarizer._compute_olympic_average([3.0, 1.0], 1, 1)}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_release(tmp_path_factory.mktemp("releases")) / TAG


def _official(release: Path, rulesets_: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", OFFICIAL, *rulesets_], env={"PYTHONPATH": str(release)},
                          capture_output=True, text=True, check=True, cwd=release)
    return json.loads(proc.stdout)


def test_the_release_tables_equal_its_own_benchmark_meta(release: Path) -> None:
    known = rulesets.known_rulesets("training", release)
    assert "6.0.0" in known
    official = _official(release, list(known))
    for ruleset in known:
        assert list(rulesets.allowed_benchmarks(ruleset, "training", release)) == official["allowed"][ruleset]
    assert set(rulesets.allowed_benchmarks("6.0.0", "training", release)) == set(V60)
    for benchmark, count in official["counts"].items():
        assert rulesets.required_runs(benchmark, "training", release) == count
    assert sum(rulesets.required_runs(b, "training", release) for b in V60) == 56


def test_the_installed_release_tables_equal_benchmark_meta() -> None:
    for ruleset in rulesets.known_rulesets():
        assert list(rulesets.allowed_benchmarks(ruleset)) == list(benchmark_meta.get_allowed_benchmarks("training",
                                                                                                       ruleset))
    for benchmark, count in benchmark_meta.get_result_file_counts("training").items():
        assert rulesets.required_runs(benchmark) == count


def test_a_benchmark_of_three_runs_scores_as_the_6_0_0_summarizer(release: Path) -> None:
    official = _official(release, [])
    assert rulesets.rules("llama31_405b", "6.0.0").dropped == 1
    assert score.olympic_mean("llama31_405b", [3.0, 1.0, 2.0]).minutes == official["olympic3"] == 2.0
    assert score.olympic_mean("deepseekv3_671b", [3.0, None, 1.0]).minutes == official["olympic3_one_failed"]
    assert score.olympic_mean("deepseekv3_671b", [None, None, 1.0]).minutes is None  # two may not be dropped
    assert rulesets.rules("unet3d", "2.0.0").dropped == 4
    assert rulesets.result_filename("unet3d", 3, "2.0.0") == "result_03.txt"
    assert rulesets.result_filename("unet3d", 3, "1.1.0") == "result_3.txt"
    assert not rulesets.rules("flux1").higher_is_better and rulesets.rules("dlrm_dcnv2").higher_is_better


def test_the_system_status_is_worded_as_the_ruleset_checks_it(release: Path) -> None:
    checker = (release / "mlperf_logging" / "system_desc_checker" / "system_desc_checker.py").read_text()
    for status in ("onprem", "cloud", "preview", "research"):
        assert f'"{rulesets.system_status(status, "6.0.0")}"' in checker
        assert rulesets.system_status(status, "2.0.0") == status


def test_the_config_reads_the_configured_release(release: Path, tmp_path: Path) -> None:
    raw = {"ruleset": "6.0.0", "benchmarks": {"flux1": {}, "dlrm_dcnv2": {}}}
    with pytest.raises(mlconfig.ConfigError, match=r"unknown ruleset '9\.9\.9'.*set logging_release"):
        mlconfig.load({**raw, "ruleset": "9.9.9"})
    _, benchmarks = mlconfig.load({**raw, "logging_release": str(release.parent)})  # the tag chosen by the ruleset
    assert {b.name: b.required_runs for b in benchmarks.values()} == {"flux1": 10, "dlrm_dcnv2": 10}
    with pytest.raises(mlconfig.ConfigError, match=r"logging_release: .*pip install --target"):
        mlconfig.load({**raw, "logging_release": str(tmp_path)})


@pytest.mark.parametrize("ruleset", ["5.1.0", "6.0.0"])
def test_rulesets_of_the_current_rounds_take_their_benchmark_names(ruleset: str) -> None:
    _, benchmarks = mlconfig.load({"ruleset": ruleset, "benchmarks": {"flux1": {}, "dlrm_dcnv2": {}}})
    assert sorted(benchmarks) == ["dlrm_dcnv2", "flux1"]


def test_every_mini_metric_runs_the_way_the_rules_say() -> None:
    from mlrepro.core.minis import implemented_benchmarks, load_module

    for benchmark in implemented_benchmarks():
        assert load_module(benchmark).Workload.higher_is_better == rulesets.rules(benchmark).higher_is_better
