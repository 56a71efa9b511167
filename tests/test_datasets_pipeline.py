"""The dataset stage through the real Snakefile: recipes from a local server, manual files, a given folder."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from mlrepro.datasets import stamps
from mlrepro.datasets.manifest import MANIFEST
from mlrepro.planning import PlanningError
from tests import dataset_sources as src
from tests.conftest import plan_config, refused_by_planning, snakemake

pytestmark = pytest.mark.integration


def _config(tmp_path: Path, data: dict[str, object]) -> str:
    path = tmp_path / f"config-{len(list(tmp_path.glob('config-*')))}.yaml"
    path.write_text(yaml.safe_dump({"data_root": str(tmp_path / "shared"), "only": sorted(data),
                                    "benchmarks": {b: {"data": d} for b, d in data.items()}}))
    return str(path)


# Each recipe's own steps (its sources, archives and preparer) run for every benchmark in tests/test_datasets.py, in
# that process, through the functions the pipeline's data jobs call (mlrepro/datasets/steps.py). What the pipeline
# adds is one path for every benchmark: planning (here: all eight), then the same four step rules and their job, the
# {benchmark} wildcard and the recipe file their only difference, chained by receipts; a later start's stamps;
# verify_data. Snakemake runs the recipes whose path through it differs: ImageNet (files placed by hand, one
# downloaded, nested archives) and Criteo (by hand, gunzipped; the file changed below), and COCO (maskrcnn: every file
# downloaded and checked against its published checksum). Each recipe's jobs cost a few processes, not its data.
THROUGH_SNAKEMAKE = ("resnet", "dlrm", "maskrcnn")


def test_every_recipe_through_the_pipeline(tmp_path: Path) -> None:
    with src.serving() as server:
        files = {b: make() for b, make in src.MAKERS.items()}
        recipes = {b: str(src.recipe_for(b, server, tmp_path / "recipes", files[b], src.EXTRA.get(b)))
                   for b in files}
        config = _config(tmp_path, {b: {"recipe": r} for b, r in recipes.items()})
        work = tmp_path / "run"

        # ImageNet and Criteo are manual: planning (the first start's, in this process) names every missing file,
        # before any job
        work.mkdir()
        with pytest.raises(PlanningError, match="datasets to download by hand") as refusal:
            plan_config(work, yaml.safe_load(Path(config).read_text()))
        first = str(refusal.value)
        downloads = {b: tmp_path / "shared" / b / "downloads" for b in ("resnet", "dlrm")}
        for name in ("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar"):
            assert f"{downloads['resnet'] / name}: get it from https://image-net.org/" in first
        assert f"{downloads['dlrm'] / 'day_1.gz'}: get it from https://ailab.criteo.com/" in first
        assert "no checksum is published: its sha256 is recorded" in first
        assert server.requests == [] and not (work / "results" / "data_receipts").exists()

        for b, folder in downloads.items():
            folder.mkdir(parents=True, exist_ok=True)
            for source in yaml.safe_load(Path(recipes[b]).read_text())["sources"]:
                if "manual" in source:
                    (folder / source["file"]).write_bytes(files[b][source["file"]])
        # with them placed, planning takes all eight, each prepared by its recipe into <data_root>/<benchmark>
        prepared = {b: tmp_path / "shared" / b / "prepared" for b in files}
        plan, _ = plan_config(work, yaml.safe_load(Path(config).read_text()))
        for b in files:
            assert plan.recipe_file(b) == Path(recipes[b]) and plan.dataset_dir(b) == prepared[b], b
            assert plan.dataset_ready(b) == plan.out.receipt(b, "prepare") and plan.prepare_image(b) == [], b
        assert server.requests == []
        only = ["--config", f"only=[{','.join(THROUGH_SNAKEMAKE)}]"]
        snakemake(work, "datasets", "--configfile", config, *only)
        for b, key in [("resnet", "train.rec"), ("maskrcnn", "pkl_coco/instances_train2017.json.pickled"),
                       ("dlrm", "train_data.bin")]:
            assert (prepared[b] / key).exists(), (b, key)
            assert (prepared[b] / MANIFEST).is_file()
        assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == sorted(THROUGH_SNAKEMAKE)

    # Bytes changed in place, size, mtime and inode kept: the second start does nothing and hashes nothing,
    # so it cannot notice...
    victim = prepared["dlrm"] / "test_data.bin"
    before = victim.stat()
    with victim.open("r+b") as f:
        f.write(b"\xff\xff\xff\x7f")
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert stamps.stamp(victim) == (before.st_size, before.st_mtime_ns, before.st_ino)
    again = snakemake(work, "datasets", "--configfile", config, *only)
    assert "Nothing to be done" in again.stdout + again.stderr
    # ...and verify_data, which hashes everything, names it
    full = snakemake(work, "verify_data", "--configfile", config, *only, check=False)
    assert full.returncode != 0
    assert f"MISMATCH {victim}: sha256 is" in full.stderr and "the manifest says" in full.stderr


def test_prepared_read_only_folder_is_used_in_place(tmp_path: Path) -> None:
    folder = tmp_path / "imagenet-prepared"
    folder.mkdir()
    for name, data in (("train.rec", b"records" * 100), ("val.rec", b"val records")):
        (folder / name).write_bytes(data)
    stamps.write_manifest(folder)
    for path in [folder, *folder.iterdir()]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))

    def snapshot() -> dict[str, tuple[int, int, int]]:
        return {p.name: stamps.stamp(p) for p in [folder, *folder.iterdir()]}

    before = snapshot()
    work = tmp_path / "run"
    config = _config(tmp_path, {"resnet": {"path": str(folder)}})
    snakemake(work, "datasets", "--configfile", config)
    assert snapshot() == before  # nothing written into it (root could have)
    assert stamps.read_receipt(work / "results" / "data_receipts" / "resnet" / "path.json")["folder"] == str(folder)

    (folder / "val.rec").chmod(0o644)
    with (folder / "val.rec").open("ab") as f:
        f.write(b"!")
    refused_by_planning(work, yaml.safe_load(Path(config).read_text()),  # the next start's planning
                        says=(f"{folder / 'val.rec'}: changed since it was verified (size differs)",
                              "snakemake verify_data"))
    full = snakemake(work, "verify_data", "--configfile", config, check=False)
    assert full.returncode != 0 and f"MISMATCH {folder / 'val.rec'}: sha256 is" in full.stderr
    assert "train.rec" not in full.stderr
