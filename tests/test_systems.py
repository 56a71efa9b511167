"""Several systems in one submission (mlrepro/systems.py): each (system, benchmark) its own runs, job shape,
config file and folders; bad system blocks are named by their key before any job."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mlrepro import config as mlconfig
from mlrepro import score
from mlrepro import systems as mlsystems
from mlrepro.core import integrity
from mlrepro.core.hashing import sha256_file
from mlrepro.package.assemble import system_descriptions
from mlrepro.planning.plan import Plan
from mlrepro.runs.capture import CaptureError
from tests.conftest import REPO, captured, make_job, write_mllog

MINI = {"only": ["resnet", "dlrm"], "allow_fewer_runs": True,
        "benchmarks": {"resnet": {"runs": 2}, "dlrm": {"runs": 2}},
        "systems": {"cpu_n1": {"benchmarks": ["resnet", "dlrm"]}, "cpu_n2": {"nodes": 2, "benchmarks": ["dlrm"]}}}


def _plan(raw: dict[str, Any], base: Path) -> Plan:
    """The plan of ``raw`` (its outputs under ``base``), each config file captured as its job does it."""
    full, benchmarks = mlconfig.load({"outdir": str(base / "results"), **raw}, "test", base_dir=base)
    systems, units = mlsystems.load(full, benchmarks, base, "test")
    return captured(Plan(full, benchmarks, {}, systems, units, REPO))


def _vendor(base: Path, second: str, nodes: int) -> dict[str, Any]:
    """An implementation folder (base/impl) with config files for 1 and 2 nodes (NVIDIA's naming), and the config
    of two systems on it: n1 (the 1-node file) and ``second`` (the 2-node file, the system's ``nodes``)."""
    folder = base / "impl"
    folder.mkdir(parents=True)
    (folder / "run_and_time.sh").write_text("#!/bin/bash\necho run\n")
    (folder / "Dockerfile").write_text("FROM scratch\n")
    for n in (1, 2):
        (folder / f"config_DGXA100_{n}x8x56.sh").write_text(
            f"export DGXNNODES={n}\nexport DGXNGPU=8\nexport WALLTIME=00:30:00\n")
    (base / "data").mkdir()
    return {"only": ["resnet"], "allow_fewer_runs": True,
            "benchmarks": {"resnet": {"implementation": "impl", "data_dir": "data", "runs": 1}},
            "systems": {"n1": {"config_files": {"resnet": "config_DGXA100_1x8x56.sh"}},
                        second: {"nodes": nodes, "config_files": {"resnet": "config_DGXA100_2x8x56.sh"}}}}


def test_each_system_and_benchmark_has_its_own_runs_shape_and_launch(tmp_path: Path) -> None:
    plan = _plan({**MINI, "outdir": str(tmp_path / "out")}, tmp_path)
    assert plan.ordered_units == [("cpu_n1", "dlrm"), ("cpu_n1", "resnet"), ("cpu_n2", "dlrm")]
    assert plan.launches.shape("cpu_n2", "dlrm").nodes == 2 and plan.launches.shape("cpu_n1", "dlrm").nodes == 1
    assert plan.launches.system_nodes("cpu_n1") == 1 and plan.launches.system_nodes("cpu_n2") == 2
    launch = plan.launches.spec("cpu_n2", "dlrm")
    assert (launch.nodes, launch.tasks_per_node, launch.submission["platform"]) == (2, 1, "cpu_n2")
    assert plan.launches.spec("cpu_n1", "dlrm").submission["platform"] == "cpu_n1"
    assert plan.all_runs(plan.out.result)[-1] == tmp_path / "out" / "runs" / "cpu_n2" / "dlrm" / "1" / "result.txt"
    assert plan.out.verdict("cpu_n2", "dlrm", 0) == tmp_path / "out" / "compliance" / "cpu_n2" / "dlrm" / "0.json"
    package = plan.package_spec()
    assert package["systems"] == {"cpu_n1": {"nodes": 1, "description": {}}, "cpu_n2": {"nodes": 2, "description": {}}}
    assert sorted(package["runs"]["cpu_n2"]) == ["dlrm"] and len(package["runs"]["cpu_n1"]["resnet"]) == 2
    # Slurm resources: values where every run agrees, a callable of the wildcards where they differ
    res = plan.run_resources()
    assert res["cpus_per_task"] == 1 and "gres" not in res and "slurm_partition" not in res
    w = type("W", (), {"system": "cpu_n2", "benchmark": "dlrm"})
    assert res["nodes"](w) == 2 and res["tasks"](w) == 2 and res["mpi"](w) == "srun"


def test_the_shorthand_is_one_system_of_every_benchmark(tmp_path: Path) -> None:
    plan = _plan({**MINI, "systems": {}, "system": "box"}, tmp_path)
    assert list(plan.systems) == ["box"] and plan.ordered_units == [("box", "dlrm"), ("box", "resnet")]
    assert plan.out.run_dir("box", "resnet", 0).parts[-4:] == ("runs", "box", "resnet", "0")


def test_a_vendor_folder_takes_each_systems_config_file(tmp_path: Path) -> None:
    plan = _plan(_vendor(tmp_path, "n2", 2), tmp_path)
    assert plan.units[("n2", "resnet")].implementation.config_file.name == "config_DGXA100_2x8x56.sh"
    assert (plan.launches.shape("n1", "resnet").nodes, plan.launches.shape("n2", "resnet").nodes) == (1, 2)
    assert plan.launches.shape("n2", "resnet").tasks_per_node == 8 and plan.launches.gpus("n2", "resnet") == 16
    assert plan.launches.spec("n2", "resnet").config_file == "config_DGXA100_2x8x56.sh"
    # the config file's content
    assert plan.rerun.launch_digest("n1", "resnet") != plan.rerun.launch_digest("n2", "resnet")


@pytest.mark.parametrize(("systems", "expected"), [
    ({"a": {"benchmarks": ["bert"]}}, "systems.a.benchmarks: bert not among the configured benchmarks"),
    ({"a": {"nodes": 0}}, "systems.a.nodes: 0 is less than the minimum of 1"),
    ({"a/b": {}}, "systems: 'a/b' does not match"),
    ({"a": {"benchmarks": ["resnet"], "config_files": {"dlrm": "config_X.sh"}}},
     "systems.a.config_files: dlrm not among this system's benchmarks"),
    ({"a": {"config_files": {"resnet": "../config_X.sh"}}}, "systems.a.config_files.resnet: '../config_X.sh' does not"),
])
def test_bad_system_blocks_are_named(systems: dict[str, Any], expected: str, tmp_path: Path) -> None:
    with pytest.raises(mlconfig.ConfigError) as err:
        _plan({**MINI, "systems": systems}, tmp_path)
    assert expected in str(err.value)


def test_system_and_systems_together_and_a_config_file_of_other_nodes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(mlconfig.ConfigError, match=r"system: 'box' and systems: both set"):
        _plan({**MINI, "system": "box"}, tmp_path)
    # a config file's node count is known once it is captured: its capture job refuses, naming the key ...
    raw = _vendor(tmp_path, "n4", 4)
    refusal = r"systems.n4: resnet: config_DGXA100_2x8x56.sh sets DGXNNODES=2, the system has nodes: 4"
    with pytest.raises(CaptureError, match=refusal):
        _plan(raw, tmp_path)
    # ... and planning, once a record of it exists (written for a system it fits)
    raw["systems"]["n4"]["nodes"] = 2
    _plan(raw, tmp_path)
    raw["systems"]["n4"]["nodes"] = 4
    full, benchmarks = mlconfig.load({"outdir": str(tmp_path / "results"), **raw}, "test", base_dir=tmp_path)
    systems, units = mlsystems.load(full, benchmarks, tmp_path, "test")
    problems = Plan(full, benchmarks, {}, systems, units, REPO).captures.problems()
    assert problems and re.search(refusal, problems[0]), problems


def test_each_system_description_names_its_system_and_nodes() -> None:
    probed = {"system_name": "host", "number_of_nodes": "1", "accelerators_per_node": "0",
              "host_networking": "N/A (single node)"}
    descs = system_descriptions(probed, {"a": {"nodes": 1, "description": {}},
                                         "b": {"nodes": 8, "description": {"accelerators_per_node": "8"}}})
    assert descs["a"] == {**probed, "system_name": "a"}
    assert (descs["b"]["system_name"], descs["b"]["number_of_nodes"], descs["b"]["accelerators_per_node"]) == \
        ("b", "8", "8")
    assert descs["b"]["host_networking"] != "N/A (single node)"


def test_one_score_table_per_system_and_benchmark(tmp_path: Path) -> None:
    runs: dict[str, dict[str, list[str]]] = {}
    for system, minutes in (("a", 1.0), ("b", 2.0)):
        for i in range(3):
            result = write_mllog(tmp_path / system / str(i) / "result.txt", "resnet", 1_700_000_000_000,
                                 minutes + i / 10)
            (result.parent / "run.json").write_text(json.dumps({"result_sha256": sha256_file(result)}))
            runs.setdefault(system, {}).setdefault("resnet", []).append(str(result))
    out = tmp_path / "scores.json"
    job = make_job("score", output={"scores": out},
                   params={"runs": runs, "keep": {"resnet": 3}, "ruleset": None, "division": "open"})
    score.job(job)
    scores = json.loads(out.read_text())
    assert scores["a"]["resnet"]["minutes"] == pytest.approx(1.1, abs=1e-3)
    assert scores["b"]["resnet"]["minutes"] == pytest.approx(2.1, abs=1e-3)
    Path(runs["b"]["resnet"][0]).write_text("changed\n")  # a result is scored only as its run recorded it
    with pytest.raises(integrity.Tampered, match="changed since its run finished"):
        score.job(job)


def test_a_run_jobs_slurm_comment_names_its_system() -> None:
    """The executor plugin's job comment (rule and wildcards) read back for the runs Slurm cancelled: a system's
    name may hold underscores, a benchmark's does not."""
    from mlrepro.slurm.jobs import RUN_COMMENT

    assert RUN_COMMENT.match("rule_run_wildcards_cpu_n2_dlrm_1").groups() == ("cpu_n2", "dlrm", "1")  # type: ignore[union-attr]
    assert RUN_COMMENT.match("rule_compliance_wildcards_cpu_n2_dlrm_1") is None
