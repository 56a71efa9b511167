"""Several systems in one submission on a real 2-node Slurm cluster (`SLURM_NODES=2 .ci/slurm.sh start`).

`snakemake --profile profiles/slurm --configfile config/test.yaml EXTRA.yaml` with two systems: cpu_n1 (one node:
resnet and dlrm) and cpu_n2 (two nodes: dlrm). One package holds both system descriptions and the results of
each (system, benchmark), and the official package checker passes it; each cpu_n2 run is one Slurm job over both
nodes (sacct's record, not the pipeline's word); the report names both systems and sets the seed's columns.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from mlrepro.core import rulesets
from tests import test_slurm
from tests.conftest import REPO, TEST_CONFIG
from tests.test_slurm import MEM, POLL, SNAKEMAKE, sacct_until
from tests.test_slurm_multinode import two_nodes  # noqa: F401  (module fixture)

pytestmark = [pytest.mark.slurm, pytest.mark.integration]
cluster, plugin = test_slurm.cluster, test_slurm.plugin  # the executor plugin, installed once for these tests
RUNS = rulesets.required_runs("dlrm", "training")  # the official checker counts them (resnet's too: 5)
EXTRA = {
    "only": ["resnet", "dlrm"], "allow_fewer_runs": True,
    "benchmarks": {"resnet": {"runs": RUNS}, "dlrm": {"runs": RUNS}},
    "inference": {"benchmarks": []},  # LoadGen is tests/test_inference.py's
    "systems": {"cpu_n1": {"benchmarks": ["resnet", "dlrm"]}, "cpu_n2": {"nodes": 2, "benchmarks": ["dlrm"]}},
    # the CI cluster's account; runs share nodes so that other tests' jobs need not wait for whole nodes
    "slurm": {"account": "root", "exclusive": False, "mem_mb": MEM},
}


def hostnames(node_list: str) -> list[str]:
    return subprocess.run(["scontrol", "show", "hostnames", node_list], capture_output=True, text=True,
                          check=True).stdout.split()


def test_two_systems_in_one_submission(two_nodes: list[str], plugin: Path, tmp_path: Path) -> None:  # noqa: F811
    extra = tmp_path / "EXTRA.yaml"
    extra.write_text(yaml.safe_dump(EXTRA))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": f"{plugin}:{REPO}"}
    proc = subprocess.run(
        [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
         "--profile", str(REPO / "profiles" / "slurm"), *POLL, "--configfile", str(TEST_CONFIG), str(extra)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = tmp_path / "results"
    org = out / "submission" / "mlrepro"

    # one package: a system description per system, the results of each (system, benchmark)
    descs = {p.stem: json.loads(p.read_text()) for p in (org / "systems").glob("*.json")}
    assert sorted(descs) == ["cpu_n1", "cpu_n2"]
    assert descs["cpu_n1"]["number_of_nodes"] == "1" and descs["cpu_n2"]["number_of_nodes"] == "2"
    assert descs["cpu_n2"]["system_name"] == "cpu_n2"
    folders = {p.relative_to(org / "results").as_posix(): len(list(p.glob("result_*.txt")))
               for p in (org / "results").glob("*/*")}
    assert folders == {"cpu_n1/resnet": RUNS, "cpu_n1/dlrm": RUNS, "cpu_n2/dlrm": RUNS}, folders
    # ... judged by the official package checker (its own output in the log)
    verdict = json.loads((out / "package_check.json").read_text())
    assert verdict["valid"] and not verdict["errors"], verdict["errors"]
    assert "PACKAGE CHECKER FOUND NO ERRORS" in (out / "pipeline_info" / "logs" / "package_checker.log").read_text()

    # each cpu_n2 run: one Slurm job over both nodes (sacct's node list), in runs/cpu_n2/dlrm/<i>/
    jobs = []
    for i in range(RUNS):
        run = json.loads((out / "runs" / "cpu_n2" / "dlrm" / str(i) / "run.json").read_text())
        assert run["processes"] == 2 and len(hostnames(run["slurm"]["node_list"])) == 2, run["slurm"]
        jobs.append((run["slurm"]["job_id"], run["slurm"]["node_list"]))
        # (tel26) each run's telemetry names both hosts: assert it here
    states = sacct_until([j for j, _ in jobs], {"COMPLETED"})
    assert all(states[j].state == "COMPLETED" and states[j].node_list == nodes for j, nodes in jobs), states
    assert len({j for j, _ in jobs}) == RUNS
    for i in range(RUNS):  # the one-node system's runs: one node each
        run = json.loads((out / "runs" / "cpu_n1" / "dlrm" / str(i) / "run.json").read_text())
        assert len(hostnames(run["slurm"]["node_list"])) == 1 and run["processes"] == 1, run["slurm"]

    # one score table; the report names both systems and sets the seed's columns for dlrm
    scores = json.loads((out / "scores.json").read_text())
    assert sorted(scores) == ["cpu_n1", "cpu_n2"] and sorted(scores["cpu_n1"]) == ["dlrm", "resnet"]
    assert all(s["minutes"] is not None for system in scores.values() for s in system.values()), scores
    report = (out / "report.html").read_text()
    assert "<strong>cpu_n1</strong> (1 node(s)" in report and "<strong>cpu_n2</strong> (2 node(s)" in report
    assert "cpu_n2 (2 nodes)" in report  # dlrm at scale: the fastest multi-node system
