"""A benchmark's dataset recipe (``workflows/<benchmark>/dataset.yaml``) and the ``data`` choice of the config."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlrepro.training.workload import workflow_dir

RECIPE = "dataset.yaml"
HASH_ALGORITHMS = ("md5", "sha256", "sha512")


class RecipeError(ValueError):
    pass


@dataclass(frozen=True)
class Source:
    file: str  # its name in the downloads folder
    url: str | None  # None: a manual source
    hash: str | None  # "md5:<hex>", "sha256:<hex>" or "sha512:<hex>"; None: the first copy's sha256 is recorded
    manual: dict[str, str] | None = None  # {"from": where to get it, "note": ...}
    size: int = 0  # bytes, for the free-space check (0: not stated)


@dataclass(frozen=True)
class Recipe:
    benchmark: str
    path: Path
    dataset: str
    mount: str  # where the implementation mounts the prepared folder
    sources: list[Source]
    extract: list[dict[str, Any]]
    prepare: dict[str, Any]
    sizes: dict[str, int] = field(default_factory=dict)

    @property
    def manual(self) -> list[Source]:
        return [s for s in self.sources if s.url is None]

    def digest(self, *parts: str) -> str:
        """A digest of the recipe's ``parts``: a folder made from other settings is not reused."""
        raw = yaml.safe_load(self.path.read_text())
        return hashlib.sha256(json.dumps([raw.get(p) for p in parts], sort_keys=True).encode()).hexdigest()


def _expand(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """``range: [a, b]`` repeats an entry for i in range(a, b), formatting ``{i}`` in its strings (KiTS19 cases)."""
    if "range" not in entry:
        return [entry]
    start, stop = entry["range"]
    rest = {k: v for k, v in entry.items() if k != "range"}
    return [{k: v.format(i=i) if isinstance(v, str) else v for k, v in rest.items()} for i in range(start, stop)]


def load(benchmark: str, path: Path | None = None) -> Recipe:
    path = path or workflow_dir(benchmark) / RECIPE
    if not path.is_file():
        raise RecipeError(f"benchmarks.{benchmark}.data: recipe: no recipe file {path}")
    raw = yaml.safe_load(path.read_text()) or {}
    sources = []
    for n, entry in enumerate(e for item in raw.get("sources", []) for e in _expand(item)):
        where = f"{path}: sources[{n}]"
        if not isinstance(entry.get("file"), str) or not entry["file"]:
            raise RecipeError(f"{where}: 'file' must be a relative name")
        if Path(entry["file"]).is_absolute() or ".." in Path(entry["file"]).parts:
            raise RecipeError(f"{where}: file {entry['file']!r} must stay inside the downloads folder")
        digest = entry.get("hash")
        if digest is not None and digest.partition(":")[0] not in HASH_ALGORITHMS:
            raise RecipeError(f"{where}: hash {digest!r} must be one of {', '.join(HASH_ALGORITHMS)} as 'alg:hex'")
        if bool(entry.get("url")) == bool(entry.get("manual")):
            raise RecipeError(f"{where}: give either 'url' or 'manual'")
        sources.append(Source(entry["file"], entry.get("url"), digest, entry.get("manual"), int(entry.get("size", 0))))
    return Recipe(benchmark, path, raw.get("dataset", benchmark), raw.get("mount", "/data"), sources,
                  list(raw.get("extract", [])), dict(raw.get("prepare", {})),
                  {k: int(v) for k, v in (raw.get("sizes") or {}).items()})


@dataclass(frozen=True)
class Choice:
    kind: str  # "generated", "recipe" or "path"
    path: Path | None = None  # the prepared folder (path) or another recipe file (recipe)


def split_choices(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Choice]]:
    """Take each ``benchmarks.<bm>.data`` that is a choice out of the config; the rest is the generator's block.

    ``data: generated`` (or the generator's parameters, the default), ``data: recipe``,
    ``data: {recipe: FILE}`` (another recipe file, e.g. a mirror) or ``data: {path: DIR}``.
    """
    config = copy.deepcopy(config)
    choices: dict[str, Choice] = {}
    for name, block in (config.get("benchmarks") or {}).items():
        value = block.get("data") if isinstance(block, dict) else None
        if value in ("generated", "recipe"):
            choices[name] = Choice(value)
        elif isinstance(value, dict) and set(value) in ({"path"}, {"recipe"}):
            (kind, where), = value.items()
            if not isinstance(where, str) or not where:
                raise RecipeError(f"benchmarks.{name}.data.{kind}: must be a path, got {where!r}")
            choices[name] = Choice(kind, Path(where).expanduser().resolve())
        elif isinstance(value, str):
            raise RecipeError(f"benchmarks.{name}.data: {value!r} is not one of generated, recipe, "
                              "{recipe: FILE}, {path: DIR} or the generator's parameters")
        else:
            choices[name] = Choice("generated")
            continue
        del block["data"]
    return config, choices
