"""The recipe's steps, each writing one folder of ``<data_root>/<benchmark>/`` with a manifest.

``downloads/`` (download, then verify), ``extracted/`` and ``prepared/``: extracted and prepared are
built under a temporary name and renamed into place when complete, under an exclusive lock on
``<data_root>/<benchmark>/.lock``, so two pipelines sharing a data_root never see half a folder; the
second one finds the folder made (for the same recipe) and only writes its own receipt.

A data_root may be shared by several users: a folder found made is reused only when it, every folder in
it, its manifest and its ``.made-by.json`` belong to this user (or to the config's ``data_group``) and no
one else can write them, and its content is the manifest's, hash for hash, with no file beyond it (the
recipe's digest in ``.made-by.json`` is public, so it proves nothing alone). Otherwise the folder is moved
aside (``<name>.rejected-<time>-<random>``, kept for inspection) and built anew, saying so.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import grp
import json
import os
import pwd
import stat
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.job import Job
from mlrepro.datasets import extract as _extract
from mlrepro.datasets import fetch, prepare, stamps
from mlrepro.datasets import recipe as _recipe
from mlrepro.datasets.manifest import MANIFEST, DataChecksumError, read_manifest
from mlrepro.datasets.recipe import Recipe
from mlrepro.datasets.safe_tree import Tree as SafeTree

MADE_BY = ".made-by.json"


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold ``root/.lock``. Another user's lock file (0644: not writable here) is locked through a read-only
    handle, which flock allows; only where there is none and none can be made (a read-only data_root, where
    nothing can be made either) go on without it. A file system that refuses locks stops, naming the file."""
    lock = root / ".lock"
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = lock.open("a")
    except OSError as e:
        if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        try:
            handle = lock.open("r")
        except FileNotFoundError:
            yield
            return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as e:  # NFS without its lock service: ENOLCK; some FUSE file systems: EOPNOTSUPP
            raise fetch.DatasetError(
                f"{lock}: the file system refuses the lock that keeps two pipelines from building one dataset at "
                f"once ({e.strerror}); put data_root on a file system with locks (NFS: mount with lockd, without "
                "nolock), or give each pipeline its own data_root") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _made(folder: Path, digest: str) -> bool:
    try:
        return (folder / MANIFEST).is_file() and json.loads((folder / MADE_BY).read_text())["recipe"] == digest
    except (OSError, ValueError, KeyError):
        return False


def group_id(name: str | None) -> int | None:
    """The gid of the config's ``data_group``; DatasetError for a group this host does not know."""
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise fetch.DatasetError(f"data_group {name!r}: no such group on this host (getent group {name})") from None


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _untrusted(path: Path, group: int | None) -> str | None:
    """Why ``path`` (a built folder, a folder in it, its manifest) is not to be trusted; None when it is."""
    st = os.lstat(path)
    in_group = group is not None and st.st_gid == group
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if st.st_uid != os.geteuid() and not in_group:
        return f"{path} is owned by {_owner(st.st_uid)}, not by you" + (" or data_group" if group is not None else "")
    if st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and not in_group):  # umask 002 without data_group
        return f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def reuse_problems(folder: Path, group: int | None) -> list[str]:
    """Why a folder found made may not be reused: who may have written it, and its content against the manifest
    recorded when it was built (every listed file's sha256; no file beyond the list). Empty: reuse it."""
    problems = [why for p in (folder, folder / MANIFEST, folder / MADE_BY) if (why := _untrusted(p, group))]
    for dirpath, dirnames, _files in os.walk(folder):
        problems += [why for d in dirnames if (why := _untrusted(Path(dirpath) / d, group))]
    if problems:
        return problems[:20]
    try:
        listed = set(read_manifest(folder))
        bad, _ = stamps.verify_folders([folder], progress=False)
    except DataChecksumError as e:
        return [str(e)]
    problems = [str(b) for b in bad]
    extra = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                   if (p.is_file() or p.is_symlink()) and not p.name.startswith(".") and p.name != MANIFEST
                   and p.relative_to(folder).as_posix() not in listed)
    problems += [f"{folder / name}: not in {folder / MANIFEST}" for name in extra[:20]]
    return problems[:40]


def _set_aside(folder: Path, problems: list[str]) -> Path:
    """Move a folder that may not be reused out of the way (kept, for inspection); say so."""
    aside = folder.with_name(f"{folder.name}.rejected-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(folder, aside)
    except OSError as e:
        raise fetch.DatasetError(
            f"{folder} does not match the manifest recorded when it was built, or others may have written it:\n  "
            + "\n  ".join(problems) + f"\nand it cannot be moved aside ({e.strerror}); remove it, or give this "
            "pipeline its own data_root") from None
    print(f"mlrepro.datasets: {folder} is not reused:\n  " + "\n  ".join(problems)
          + f"\nmoved aside to {aside}; building it anew", file=sys.stderr, flush=True)
    return aside


def download(recipe: Recipe, root: Path, receipt: Path, progressbar: bool = True) -> None:
    with locked(root):
        files = fetch.download(recipe, root, root / "downloads", progressbar=progressbar)
    atomic.write_json(receipt, {"folder": str((root / "downloads").resolve()),
                                "files": {p.name: list(stamps.stamp(p)) for p in files}})


def verify(recipe: Recipe, root: Path, receipt: Path) -> None:
    """Check every source against its published or recorded checksum; write the downloads' manifest."""
    downloads = root / "downloads"
    with locked(root):
        digests: dict[str, str] = {}
        for source in recipe.sources:
            path = downloads / source.file
            if not path.is_file():
                raise fetch.DatasetError(f"{path}: missing; run the download step (snakemake) again")
            expected = fetch.known_hash(root, source)
            algorithm, _, want = (expected or "sha256:").partition(":")
            got = stamps.hash_file(path, {"sha256", algorithm})
            if want and got[algorithm] != want.lower():
                fix = "delete it to download it again" if source.url else "replace it with a good copy"
                raise fetch.DatasetError(f"{path}: {algorithm} is {got[algorithm]}, expected {want} "
                                         f"({'published in ' + str(recipe.path) if source.hash else 'recorded'}); "
                                         f"{fix}")
            if not expected:
                fetch.record(root, source.file, got["sha256"])
            digests[source.file] = got["sha256"]
        stamps.write_manifest(downloads, list(digests), digests)
    stamps.write_receipt(receipt, downloads)


def _build(recipe: Recipe, root: Path, name: str, parts: tuple[str, ...], needed: int,
           make: Any, receipt: Path, group: int | None = None) -> None:
    with locked(root):
        _build_held(recipe, root, name, parts, needed, make, group)
    stamps.write_receipt(receipt, root / name)


def _build_held(recipe: Recipe, root: Path, name: str, parts: tuple[str, ...], needed: int, make: Any,
                group: int | None) -> None:
    """``root/name`` made (or found made and reusable) by ``make``; the caller holds ``root``'s lock."""
    folder = root / name
    digest = recipe.digest(*parts)
    if _made(folder, digest) and (problems := reuse_problems(folder, group)):
        _set_aside(folder, problems)
    if folder.exists() and not _made(folder, digest):
        # another pipeline sharing this data_root may be reading it: never swapped under it
        try:
            maker = json.loads((folder / MADE_BY).read_text()).get("file")
        except (OSError, ValueError, AttributeError):
            maker = None
        raise fetch.DatasetError(
            f"{folder} was made by another recipe ({maker or 'unknown'}) than {recipe.path}, and a pipeline "
            "sharing this data_root may be using it: it is not rebuilt in place. When none uses it, remove it "
            f"(rm -r {folder}) and run again; or give this pipeline its own data_root.")
    if not _made(folder, digest):
        fetch.check_free_space(root, needed, name, recipe)
        with atomic.atomic_dir(folder) as tmp:
            make(tmp)
            stamps.write_manifest(tmp)
            atomic.write_json(tmp / MADE_BY, {"recipe": digest, "file": str(recipe.path)})


def extract(recipe: Recipe, root: Path, receipt: Path, group: int | None = None) -> None:
    """Every ``extract`` entry into one temporary folder, written only through it (mlrepro/datasets/extract.py)."""
    _build(recipe, root, "extracted", EXTRACTED, recipe.sizes.get("extracted", 0), _extractor(recipe, root), receipt,
           group)


EXTRACTED = ("sources", "extract")  # the recipe's parts an extracted folder is made of


def _extractor(recipe: Recipe, root: Path) -> Any:
    downloads = root / "downloads"

    def make(tmp: Path) -> None:
        # names judged by recipe.load; a manual source may be a link to another disk, so they are not resolved
        sources = [downloads / (step.get("gunzip") or step["archive"]) for step in recipe.extract]
        stated = recipe.sizes.get("extracted", 0)
        budget = (_extract.Budget(stated, f"sizes.extracted in {recipe.path}", "a size to raise there") if stated
                  else _extract.ratio_budget(sources, f"as {recipe.path} states no sizes.extracted",
                                             "a size to state there"))
        with SafeTree(tmp) as tree:
            for step, source in zip(recipe.extract, sources, strict=True):
                into = PurePosixPath(step.get("into", ".")).parts  # judged by recipe.load
                if "gunzip" in step:  # Criteo's day_N.gz -> day_N
                    _extract.gunzip(source, tree, (*into, source.stem), budget)
                    continue
                with source.open("rb") as file:
                    made = _extract.unpack(file, str(source), tree, into, budget)
                if step.get("nested"):  # ImageNet's train tar: one tar per class, each into its own folder
                    for inner in made:
                        _extract.unpack_nested(tree, inner, str(source), budget)
            _extract.check_links(tree)

    return make


def prepare_step(recipe: Recipe, root: Path, receipt: Path, runner: Any = None, group: int | None = None) -> None:
    """Lay the dataset out as the implementation mounts it: its own scripts in its image (``runner``), or ours."""

    def make(tmp: Path) -> None:
        # what it is made from is held to the same rules: a poisoned extracted folder (its files may be the
        # prepared folder's own, hard-linked) is set aside and extracted anew, under the lock already held
        extracted = root / "extracted"
        if _made(extracted, recipe.digest(*EXTRACTED)) and (problems := reuse_problems(extracted, group)):
            _set_aside(extracted, problems)
            _build_held(recipe, root, "extracted", EXTRACTED, recipe.sizes.get("extracted", 0),
                        _extractor(recipe, root), group)
        if runner is not None and recipe.prepare.get("image"):
            runner(recipe.prepare["image"], root / "extracted", root / "downloads", tmp)
        else:
            prepare.run(recipe, root / "extracted", root / "downloads", tmp)
        prepare.check_published(recipe, root / "downloads", tmp)

    _build(recipe, root, "prepared", ("sources", "extract", "prepare"), recipe.sizes.get("prepared", 0), make,
           receipt, group)


def adopt(folder: Path, receipt: Path) -> None:
    """``data: {path: DIR}``: verify DIR against its own manifest once, writing nothing into it."""
    if not (folder / MANIFEST).is_file():
        raise fetch.DatasetError(
            f"{folder}: no {MANIFEST}; a prepared folder is used only with its manifest. Make one with "
            f"`cd {folder} && find . -type f ! -name {MANIFEST} -printf '%P\\0' | sort -z | "
            f"xargs -0 sha256sum > {MANIFEST}` (or prepare it with data: recipe).")
    try:  # names that leave the folder, or none at all: nothing would be verified
        if not read_manifest(folder):
            raise fetch.DatasetError(f"{folder / MANIFEST}: lists no files; a prepared folder is used only with a "
                                     "manifest of its files (make one as above)")
        problems, _ = stamps.verify_folders([folder], progress=False)
    except DataChecksumError as e:
        raise fetch.DatasetError(str(e)) from None
    if problems:
        raise fetch.DatasetError("\n".join(map(str, problems)))
    stamps.write_receipt(receipt, folder)


def job(job: Job) -> None:
    """A recipe step of rules/data.smk: params step and root (<data_root>/<benchmark>); extract and prepare: group
    (the config's data_group, whose members' folders are reused); prepare: locked (its image's lock)."""
    recipe = _recipe.load(job.wildcards["benchmark"], job.input["recipe"])
    root, receipt, step = Path(job.params["root"]).resolve(), job.output.first, job.params["step"]
    if step == "download":
        download(recipe, root, receipt)
    elif step == "verify":
        verify(recipe, root, receipt)
    elif step == "extract":
        extract(recipe, root, receipt, group_id(job.params["group"]))
    else:
        image = job.input.get("image")
        runner = image_runner(recipe.benchmark, image, job.params["locked"], root / "prepare.log") if image else None
        prepare_step(recipe, root, receipt, runner, group_id(job.params["group"]))


def adopt_job(job: Job) -> None:
    """rules/data.smk data_path: params folder."""
    adopt(Path(job.params["folder"]).resolve(), job.output.first)


def image_runner(benchmark: str, image_record: Path, locked: bool, log: Path) -> Any:
    """Run the recipe's ``prepare.image.command`` in the implementation's image (the engine its build record
    names): the sources read-only."""
    from mlrepro.containers.lock import image_ref
    from mlrepro.engines import Mount, engine_for

    engine = engine_for("native", image_record)
    image = image_ref(image_record, locked=locked)

    def run(spec: dict, extracted: Path, downloads: Path, out: Path) -> None:
        argv = [str(a).format(extracted=extracted, downloads=downloads, prepared=out) for a in spec["command"]]
        mounts = [Mount(extracted, read_only=True), Mount(downloads, read_only=True), Mount(out, read_only=False)]
        code = engine.run(argv, image=image, mounts=mounts, gpus=False, env={}, log=log)
        if code:
            raise prepare.PrepareError(f"{benchmark}: {' '.join(argv)} in image {image} exited with {code}; see {log}")

    return run
