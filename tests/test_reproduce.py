"""The reproduce target on a package the pipeline made: same seeds, same epochs and metrics; a changed
hyperparameter named; what is missing named before any run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mlrepro import reproduce
from tests.conftest import REPO, snakemake

pytestmark = pytest.mark.slow


def _reproduce(workdir: Path, package: Path, *config: str, check: bool = True):
    return snakemake(workdir, "--config", f"reproduce={package}", "only=[resnet]", *config, check=check)


def test_package_reproduces_bit_identically_on_cpu(tiny_package: Path, tmp_path: Path) -> None:
    org = tiny_package / "submission" / "mlrepro"
    # Two runs against five: the smallest attainable Mann-Whitney p is 0.095, so times on this shared,
    # loaded machine inform the report but cannot fail the verdict; seeds, epochs and metrics decide it.
    _reproduce(tmp_path, org, "runs=2")
    doc = json.loads((tmp_path / "reproduction" / "reproduction.json").read_text())
    assert doc["verdict"] == "reproduced", doc["benchmarks"][0]["reasons"]
    bench = doc["benchmarks"][0]
    manifest = json.loads((org / "provenance.json").read_text())
    assert [r["seed"] for r in bench["runs"]] == [r["seed"] for r in manifest["runs"][:2]]
    for run in bench["runs"]:
        assert run["reproduced_seed"] == run["seed"] and run["compliant"] is True
        assert run["reproduced_epochs"] == run["submitted_epochs"]
        assert run["metrics_identical"] and run["reproduced_evals"] == run["submitted_evals"]
        assert run["hyperparameter_differences"] == []
    assert bench["dataset"]["identical"]
    assert bench["dataset"]["submitted_sha256"] == manifest["datasets"]["resnet"]["sha256"]
    assert bench["times"]["test"] == "Mann-Whitney U, two-sided" and bench["times"]["p"] is not None
    assert bench["olympic_submitted"] == pytest.approx(json.loads((tiny_package / "scores.json").read_text())
                                                       ["resnet"]["minutes"])
    html = (tmp_path / "reproduction" / "reproduction.html").read_text()
    assert "Verdict: <strong class=\"ok\">reproduced</strong>" in html and "bit-identical" in html
    assert "Mann-Whitney U" in html and manifest["runs"][0]["file"].rsplit("/", 1)[1] in html
    # the reproduction's runs are on the record too: one ledger launch each
    assert len((tmp_path / "reproduction" / "runs" / "resnet" / "0" / "ledger.jsonl").read_text().splitlines()) == 2


def test_changed_hyperparameter_is_not_reproduced_and_named(tiny_package: Path, tmp_path: Path) -> None:
    changed = tmp_path / "changed.yaml"
    changed.write_text("benchmarks:\n  resnet: {lr: 0.05}\n")
    _reproduce(tmp_path, tiny_package / "submission" / "mlrepro", "runs=1", "--configfile", str(changed))
    doc = json.loads((tmp_path / "reproduction" / "reproduction.json").read_text())
    assert doc["verdict"] == "not reproduced"
    reasons = doc["benchmarks"][0]["reasons"]
    assert any("sgd_opt_base_learning_rate" in r and "0.1" in r and "0.05" in r for r in reasons), reasons
    assert "sgd_opt_base_learning_rate: 0.1 → 0.05" in (tmp_path / "reproduction" / "reproduction.html").read_text()


def test_missing_implementation_and_system_are_named_before_any_run(tiny_package: Path, tmp_path: Path) -> None:
    org = Path(shutil.copytree(tiny_package / "submission" / "mlrepro", tmp_path / "pkg" / "mlrepro"))
    out = _reproduce(tmp_path, org, "system=DGXA100", "-n", check=False)
    assert out.returncode != 0 and "no results for system 'DGXA100'" in out.stdout + out.stderr
    shutil.rmtree(org / "benchmarks" / "resnet" / "implementations")
    out = _reproduce(tmp_path, org, "-n", check=False)
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "no runnable implementation of resnet" in text and "only=[...]" in text
    assert not (tmp_path / "reproduction").exists()


def test_plan_without_manifest_uses_logged_seeds_with_a_note(tiny_package: Path, tmp_path: Path) -> None:
    org = Path(shutil.copytree(tiny_package / "submission" / "mlrepro", tmp_path / "mlrepro"))
    (org / "provenance.json").unlink()
    p = reproduce.plan(org, system="auto", only=[], runs=None, overrides={}, default_data_seed=20220629)
    logged = [reproduce.read_log(Path(f)).seed for f in p.benchmarks["resnet"].result_files]
    assert p.runs == 5 and p.benchmarks["resnet"].seeds == logged and not p.manifest
    assert any("no provenance.json" in n for n in p.notes)


SHARED = REPO.parent / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "mlperf_training_nvidia_implementations_v1.1.tar.xz").is_file(),
                    reason="../shared/data is absent")
def test_nvidia_v11_layout_is_recognised_with_its_dgxa100_config(tmp_path: Path) -> None:
    """NVIDIA's v1.1 ResNet package: its implementation folder and config_DGXA100.sh are found; running
    run_and_time.sh waits for the implementations plug-in driver, and the plan says so before any run."""
    subprocess.run(["tar", "-xJf", str(SHARED / "mlperf_training_results_v1.1.tar.xz"), "-C", str(tmp_path),
                    "./NVIDIA/results/dgxa100_ngc21.09_mxnet/resnet", "./NVIDIA/systems/dgxa100_ngc21.09_mxnet.json"],
                   check=True)
    subprocess.run(["tar", "-xJf", str(SHARED / "mlperf_training_nvidia_implementations_v1.1.tar.xz"), "-C",
                    str(tmp_path), "NVIDIA/benchmarks/resnet/implementations/mxnet"], check=True)
    org = tmp_path / "NVIDIA"
    impl = reproduce.locate_implementation(org, "resnet", "dgxa100_ngc21.09_mxnet")
    assert impl.layout == "mlcommons" and impl.config is not None and impl.config.name == "config_DGXA100.sh"
    with pytest.raises(reproduce.ReproduceError, match=re.escape("config_DGXA100.sh for dgxa100_ngc21.09_mxnet")):
        reproduce.plan(org, system="dgxa100_ngc21.09_mxnet", only=["resnet"], runs=None, overrides={},
                       default_data_seed=0)
    with pytest.raises(reproduce.ReproduceError, match="no config file for system dgx2"):
        reproduce.locate_implementation(org, "resnet", "dgx2_ngc21.09_mxnet")
