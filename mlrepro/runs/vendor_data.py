"""What fills a vendor folder's container mounts: a benchmark's data recipe, or the submitter by hand.

A folder's run.sub mounts host folders (datasets, checkpoints, tokenizers) from variables; which variable feeds which
container-side destination is found from the run itself (mlrepro/runs/demands.py). What the destination is, is the
benchmark's: a recipe (``minis/<bm>/dataset.yaml``) prepares the dataset its ``mount`` names (and more:
mlrepro/datasets/vendor_fills.py), and the variable that feeds that destination is set to the prepared folder;
every other destination is prepared by hand as the folder's README says (:data:`BY_HAND` names the usual ones).
Matching by destination, not by variable name, holds for folders of any round: a v4.1 ``ssd`` (RetinaNet) mounts
``/datasets/open-images-v6``, which the v1.1 SSD recipe (``/data``) does not fill.
"""

from __future__ import annotations

# what a destination holds where no recipe fills it: checkpoints, tokenizers and datasets of the folders' READMEs
BY_HAND = {
    "/ckpt": "the base model's checkpoint", "/load_checkpoints": "the starting checkpoint",
    "/checkpoints": "the pretrained checkpoints", "/checkpoints/clip": "the CLIP checkpoint",
    "/checkpoints/inception": "the FID (Inception) checkpoint", "/checkpoints/sd": "the base model's checkpoint",
    "/workspace/llm/tokenizer.model": "the tokenizer model file", "/workspace/llm/tokenizer": "the tokenizer",
    "/root/.cache/torch": "the backbone's pretrained weights (torch hub cache)",
    "/pretrained/mxnet": "the backbone's pretrained weights", "/workspace/phase1": "the phase-1 checkpoint",
    "/workspace/evaldata": "the evaluation set", "/workspace/data_phase2": "the phase-2 dataset",
    "/graph": "the graph", "/preproc_data": "the preprocessed dataset", "/datasets": "the dataset",
    "/data": "the dataset", "/data_val": "the validation set", "/npy_index": "a scratch folder it writes",
    "/nemologs": "a folder for NeMo's logs", "/results": "the run's log folder", "/logs": "a folder for API logs",
}


def _norm(dest: str) -> str:
    return dest.rstrip("/") or "/"


def fill(benchmark: str, mounts: list[str], fills: dict[str, str]) -> str:
    """What fills the destinations ``mounts`` of one variable, in words for a submitter; ``fills``: the benchmark's
    recipe's (mlrepro.datasets.vendor_fills.recipe_fills)."""
    if not mounts:
        return "run.sub reads it itself (no mount): the folder's README names its value"
    for dest in map(_norm, mounts):
        if dest in fills:
            sub = fills[dest]
            where = "its prepared folder" if sub == "." else f"the {sub}/ of its prepared folder"
            return (f"the data recipe minis/{benchmark}/dataset.yaml fills {dest}: prepare it "
                    f"(benchmarks.{benchmark}.data: recipe) and name {where}")
    what = ", ".join(BY_HAND.get(_norm(d), "its content") + f" at {_norm(d)}" for d in mounts)
    none = f"no data recipe of {benchmark} would" if not fills else f"the data recipe of {benchmark} does not"
    return f"{none} fill it: prepare {what} by hand as the folder's README says"
