"""Which container-side destinations of a vendor folder a benchmark's data recipe fills (mlrepro/runs/vendor_data.py
says what fills the others): the recipe's ``mount``, and for the recipes whose prepared folder holds more than one
mounted folder, each destination with its subfolder (the layouts of the recipes' own comments,
``minis/<bm>/dataset.yaml``). Read while planning (our own files); the run's mounts are found by a job."""

from __future__ import annotations

from mlrepro.datasets import recipe

# destinations a recipe fills beyond its `mount`, each with the subfolder of its prepared folder that feeds it
# (the layouts of the recipes' own comments: minis/<bm>/dataset.yaml)
RECIPE_FILLS: dict[str, dict[str, str]] = {
    "bert": {"/workspace/data": "hdf5/training-4320/hdf5_4320_shards_varlength",
             "/workspace/evaldata": "hdf5/eval_varlength", "/workspace/phase1": "phase1"},
    "rnnt": {"/datasets": ".", "/metadata": "metadata", "/sentencepieces": "sentencepieces"},
    "maskrcnn": {"/data": ".", "/pkl_coco": "pkl_coco"},
    # manual sources without a prepare step: each is its own subfolder, named as the recipe's source
    "llama2_70b_lora": {"/data": "gov_report", "/ckpt": "model"},
    "llama31_8b": {"/preproc_data": "llama3_1_8b_preprocessed_c4_dataset",
                   "/workspace/llm/tokenizer": "llama3_1_8b_tokenizer"},
    "llama31_405b": {"/preproc_data": "c4_mixtral_8x22b_preprocessed", "/load_checkpoints": "llama31_405b_checkpoint"},
    "gpt_oss_20b": {"/preproc_data": "c4_gpt_oss_preprocessed"},
    "deepseekv3_671b": {"/preproc_data": "c4_deepseekv3_preprocessed"},
}


def recipe_fills(benchmark: str) -> dict[str, str]:
    """The destinations the benchmark's recipe fills, each with its prepared folder's subfolder; {} without one."""
    try:
        found = recipe.load(benchmark)
    except recipe.RecipeError:
        return {}
    return RECIPE_FILLS.get(benchmark, {found.mount.rstrip("/") or "/": "."})
