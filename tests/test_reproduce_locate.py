"""Where a package keeps the implementation a reproduction runs (in-process: no run, no Snakemake)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrepro.reproduce import locate
from mlrepro.reproduce.errors import ReproduceError
from mlrepro.runs.implementation import MINI, RUN_SCRIPT


def package_with_minis(tmp_path: Path, folder_name: str) -> Path:
    """An organisation folder as mlrepro/package/assemble.py writes it: the minis' folder beside mlrepro/."""
    org = tmp_path / "org"
    impl = org / "benchmarks" / "resnet" / "implementations" / "mlrepro"
    (impl / "mlrepro").mkdir(parents=True)
    run_folder = impl / folder_name / "resnet"
    run_folder.mkdir(parents=True)
    (run_folder / RUN_SCRIPT).write_text("#!/bin/bash\n")
    (run_folder / "config_CPU.sh").write_text("export DGXNGPU=1\n")
    return org


@pytest.mark.parametrize("folder_name", ["minis", "workflows"])
def test_our_minis_are_found_under_todays_name_and_the_name_before_the_rename(tmp_path: Path,
                                                                             folder_name: str) -> None:
    org = package_with_minis(tmp_path, folder_name)
    impl = locate.locate_implementation(org, "resnet", "CPU")
    assert impl.kind == MINI
    assert impl.run_folder == org / "benchmarks" / "resnet" / "implementations" / "mlrepro" / folder_name / "resnet"


def test_a_minis_folder_without_mlrepro_beside_it_is_not_an_implementation(tmp_path: Path) -> None:
    org = package_with_minis(tmp_path, "minis")
    (org / "benchmarks" / "resnet" / "implementations" / "mlrepro" / "mlrepro").rmdir()
    with pytest.raises(ReproduceError, match=r"minis/resnet/run_and_time\.sh beside mlrepro/"):
        locate.locate_implementation(org, "resnet", "CPU")
