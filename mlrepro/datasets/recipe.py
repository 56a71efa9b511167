"""A benchmark's dataset recipe (``minis/<benchmark>/dataset.yaml``) and the ``data`` choice of the config."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from mlrepro.core.errors import MlreproError
from mlrepro.core.minis import mini_dir

RECIPE = "dataset.yaml"
HASH_ALGORITHMS = ("md5", "sha256", "sha512")


class RecipeError(MlreproError, ValueError):
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
        """A digest of the recipe's ``parts``: a folder made from other settings is not reused. A source with a
        published hash is that content wherever it comes from: its url (or manual note) and size leave it out,
        so that a mirror's recipe (``data: {recipe: FILE}``) finds the folder made."""
        raw = yaml.safe_load(self.path.read_text())

        def what(part: str) -> Any:
            if part != "sources":
                return raw.get(part)
            return [{k: v for k, v in s.items() if k not in ("url", "manual", "size")} if s.get("hash") else s
                    for s in raw.get("sources") or []]

        return hashlib.sha256(json.dumps([what(p) for p in parts], sort_keys=True).encode()).hexdigest()


def _expand(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """``range: [a, b]`` repeats an entry for i in range(a, b), formatting ``{i}`` in its strings (KiTS19 cases)."""
    if "range" not in entry:
        return [entry]
    start, stop = entry["range"]
    rest = {k: v for k, v in entry.items() if k != "range"}
    return [{k: v.format(i=i) if isinstance(v, str) else v for k, v in rest.items()} for i in range(start, stop)]


def load(benchmark: str, path: Path | None = None) -> Recipe:
    path = path or mini_dir(benchmark) / RECIPE
    if not path.is_file():
        raise RecipeError(f"benchmarks.{benchmark}.data: recipe: no recipe file {path}")
    raw = yaml.safe_load(path.read_text()) or {}
    sources = []
    for n, entry in enumerate(e for item in raw.get("sources", []) for e in _expand(item)):
        where = f"{path}: sources[{n}]"
        _name(where, "file", entry.get("file"), "downloads")
        digest = entry.get("hash")
        if digest is not None and digest.partition(":")[0] not in HASH_ALGORITHMS:
            raise RecipeError(f"{where}: hash {digest!r} must be one of {', '.join(HASH_ALGORITHMS)} as 'alg:hex'")
        if bool(entry.get("url")) == bool(entry.get("manual")):
            raise RecipeError(f"{where}: give either 'url' or 'manual'")
        sources.append(Source(entry["file"], entry.get("url"), digest, entry.get("manual"), int(entry.get("size", 0))))
    files = {s.file for s in sources}
    extract = [_extract_step(f"{path}: extract[{n}]", step, files) for n, step in enumerate(raw.get("extract") or [])]
    return Recipe(benchmark, path, raw.get("dataset", benchmark), raw.get("mount", "/data"), sources, extract,
                  _prepare(f"{path}: prepare", raw.get("prepare") or {}, files), _sizes(path, raw.get("sizes") or {}))


def _name(where: str, key: str, value: Any, folder: str, dot: bool = False) -> str:
    """A name that becomes a path below ``folder``: relative, no ``..`` (``.``, the folder itself, if ``dot``)."""
    parts = PurePosixPath(value.replace("\\", "/")).parts if isinstance(value, str) else ()
    if not isinstance(value, str) or not value or "\0" in value or value.startswith(("/", "\\")) or ".." in parts \
            or not (parts or dot):
        raise RecipeError(f"{where}: {key} {value!r} must stay inside the {folder} folder "
                          f"(a relative name{', or .' if dot else ''}, no '..')")
    return value


def _source_file(where: str, key: str, value: Any, files: set[str]) -> str:
    if value not in files:
        raise RecipeError(f"{where}: {key} {value!r} is not the file of any of the recipe's sources")
    return value


def _extract_step(where: str, step: Any, files: set[str]) -> dict[str, Any]:
    keys = set(step) if isinstance(step, dict) else set()
    if len(keys & {"archive", "gunzip"}) != 1 or keys - {"archive", "gunzip", "into", "nested"}:
        raise RecipeError(f"{where}: {step!r} must be {{archive: FILE}} or {{gunzip: FILE}}, "
                          "with an optional into: FOLDER (and nested: true for archives of archives)")
    for key in keys & {"archive", "gunzip"}:
        _source_file(where, key, step[key], files)
    _name(where, "into", step.get("into", "."), "extracted", dot=True)
    if not isinstance(step.get("nested", False), bool):
        raise RecipeError(f"{where}: nested {step['nested']!r} must be true or false")
    return dict(step)


def _prepare(where: str, prepare: Any, files: set[str]) -> dict[str, Any]:
    if not isinstance(prepare, dict):
        raise RecipeError(f"{where}: must be a mapping, got {prepare!r}")
    if "published_md5" in prepare:
        _source_file(where, "published_md5", prepare["published_md5"], files)
    chk = prepare.get("chk") or {}
    if not isinstance(chk, dict):
        raise RecipeError(f"{where}.chk: must map prepared folders to checksum files, got {chk!r}")
    for folder, name in chk.items():
        _name(f"{where}.chk", "folder", folder, "prepared")
        _name(f"{where}.chk", "file", name, "downloads")
    return dict(prepare)


def _sizes(path: Path, sizes: Any) -> dict[str, int]:
    if not isinstance(sizes, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in sizes.values()):
        raise RecipeError(f"{path}: sizes {sizes!r} must map extracted and prepared to bytes (whole numbers)")
    return dict(sizes)


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
