"""Hostile dataset archives and recipes (issue 23): nothing is written outside the extracted folder, a
decompression bomb stops at the recipe's size, and every recipe field that becomes a path is judged."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import stat
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path

import pytest
import yaml

from mlrepro.datasets import extract, prepare, recipe, steps
from mlrepro.datasets.safe_tree import CHUNK, Tree
from tests import dataset_sources as src
from tests.conftest import REPO, refused_by_planning

GiB = 1 << 30


@pytest.fixture(scope="module")
def server():
    with src.serving() as s:
        yield s


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


def _tar(*members: tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in members:
            info, data = entry if isinstance(entry, tuple) else (entry, b"")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


def _everything(folder: Path) -> set[str]:
    """Every name below ``folder`` (links not followed), to see that nothing appeared outside."""
    return {os.path.join(d, n)[len(str(folder)):] for d, dirs, files in os.walk(folder) for n in dirs + files}


def _extract_beside(tmp_path: Path, data: bytes) -> tuple[Path, set[str]]:
    """Extract ``data`` into tmp/inner/dest with a folder ``outside`` beside dest; return dest and the
    names outside dest before extracting."""
    (tmp_path / "inner" / "outside").mkdir(parents=True)
    (tmp_path / "inner" / "outside" / "keep.txt").write_text("mine")
    archive = tmp_path / "hostile.tar"
    archive.write_bytes(data)
    return tmp_path / "inner" / "dest", _everything(tmp_path)


def _nothing_outside(tmp_path: Path, before: set[str]) -> None:
    after = {n for n in _everything(tmp_path) if not n.startswith("/inner/dest/") and n != "/inner/dest"}
    assert after == before
    assert (tmp_path / "inner" / "outside" / "keep.txt").read_text() == "mine"


def path_max_tar(bottom_link_through_symlinks: bool = True) -> bytes:
    """Issue 23's tar: 16 nested folders with 251-character names and a one-letter symlink to each, a link
    ``../`` x16 at the bottom, a link through it to the folder ``outside``, then a file below that link.
    Lexically every name stays inside; followed, the real path passes PATH_MAX, where realpath stops."""
    comp, letters = "d" * 251, "abcdefghijklmnop"
    members: list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]] = []
    real = ""
    for letter in letters:
        members.append(_info(f"{real}{comp}", tarfile.DIRTYPE, mode=0o755))
        members.append(_info(f"{real}{letter}", tarfile.SYMTYPE, comp))
        real += comp + "/"
    short = "/".join(letters)
    bottom = (short if bottom_link_through_symlinks else real.rstrip("/")) + "/" + "l" * 254
    members.append(_info(bottom, tarfile.SYMTYPE, "../" * len(letters)))
    members.append(_info("escape", tarfile.SYMTYPE, f"{short}/{'l' * 254}/../outside"))
    members.append((_info("escape/pwned"), b"written outside"))
    return _tar(*members)


@pytest.mark.parametrize("bottom_through_symlinks", [True, False])
def test_the_path_max_tar_writes_nothing_outside(tmp_path: Path, bottom_through_symlinks: bool) -> None:
    dest, before = _extract_beside(tmp_path, path_max_tar(bottom_through_symlinks))
    # through the one-letter links the bottom link is refused where it is written; made at its real place,
    # `escape` is refused when its file would be written through it
    refused = f"member '{'a/b' if bottom_through_symlinks else 'escape/pwned'}.*under '(a|escape)', which is a symbolic"
    with pytest.raises(extract.UnsafeArchiveError, match=refused):
        extract.extract(tmp_path / "hostile.tar", dest)
    _nothing_outside(tmp_path, before)


def test_a_link_that_escapes_only_through_other_links_is_refused(tmp_path: Path) -> None:
    data = path_max_tar(bottom_link_through_symlinks=False)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        data = _tar(*[m for m in tar.getmembers() if m.name != "escape/pwned"])
    dest, before = _extract_beside(tmp_path, data)
    with pytest.raises(extract.UnsafeArchiveError,
                       match=r"member 'escape' leads outside the target folder through the archive's"):
        extract.extract(tmp_path / "hostile.tar", dest)
    _nothing_outside(tmp_path, before)


# hostile tars (members) and what refuses them
HOSTILE_TARS: list[tuple[list, str]] = [
    ([(_info("../x"), b"x")], r"member '\.\./x' has a '\.\.' component"),
    ([(_info("a/../../x"), b"x")], r"member 'a/\.\./\.\./x' has a '\.\.' component"),
    ([(_info("/abs/x"), b"x")], r"member '/abs/x' has an absolute path"),
    ([_info("up", tarfile.SYMTYPE, "../outside")], r"member 'up' links to '\.\./outside', outside the target"),
    ([_info("a/b/up", tarfile.SYMTYPE, "../../../outside/keep.txt")], r"links to .*outside the target"),
    ([_info("abs", tarfile.SYMTYPE, "/etc")], r"member 'abs' links to '/etc', outside the target"),
    ([_info("hard", tarfile.LNKTYPE, "../outside/keep.txt")], r"member 'hard' links to .*outside the target"),
    ([_info("hard", tarfile.LNKTYPE, "/etc/passwd")], r"member 'hard' links to '/etc/passwd', outside the"),
    ([_info("chr", tarfile.CHRTYPE)], r"member 'chr' is a device or FIFO"),
    ([_info("blk", tarfile.BLKTYPE)], r"member 'blk' is a device or FIFO"),
    ([_info("fifo", tarfile.FIFOTYPE)], r"member 'fifo' is a device or FIFO"),
    ([_info("in", tarfile.DIRTYPE), _info("d", tarfile.SYMTYPE, "in"), (_info("d/x"), b"x")],
     r"member 'd/x' is under 'd', which is a symbolic link; nothing is written through a link"),
    ([(_info("f"), b"x"), (_info("f/x"), b"x")], r"member 'f/x' is under 'f', which is not a folder"),
    ([_info("l", tarfile.SYMTYPE, "in/f"), _info("h", tarfile.LNKTYPE, "l")],
     r"member 'h' links to 'l', which is not a regular file"),
    ([_info("loop", tarfile.SYMTYPE, "loop2"), _info("loop2", tarfile.SYMTYPE, "loop")], r"or loops"),
]


@pytest.mark.parametrize("members, problem", HOSTILE_TARS)
def test_hostile_tar_members_are_refused_and_nothing_lands_outside(
        tmp_path: Path, members: list, problem: str) -> None:
    dest, before = _extract_beside(tmp_path, _tar(*members))
    with pytest.raises(extract.UnsafeArchiveError, match=rf"hostile\.tar: .*{problem}"):
        extract.extract(tmp_path / "hostile.tar", dest)
    _nothing_outside(tmp_path, before)
    assert not any(stat.S_ISCHR(p.lstat().st_mode) or stat.S_ISBLK(p.lstat().st_mode)
                   or stat.S_ISFIFO(p.lstat().st_mode) for p in dest.rglob("*"))


def test_a_later_member_replaces_a_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    dest, before = _extract_beside(tmp_path, _tar(
        (_info("data/target.txt"), b"original"), _info("data/link", tarfile.SYMTYPE, "target.txt"),
        (_info("data/link"), b"new")))
    extract.extract(tmp_path / "hostile.tar", dest)
    assert (dest / "data" / "target.txt").read_bytes() == b"original"
    assert not (dest / "data" / "link").is_symlink() and (dest / "data" / "link").read_bytes() == b"new"
    _nothing_outside(tmp_path, before)


def test_an_ordinary_tar_keeps_its_files_links_modes_and_times(tmp_path: Path) -> None:
    archive = tmp_path / "ok.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in [(_info("./top/", tarfile.DIRTYPE, mode=0o755), b""),
                           (_info("./top/run.sh", mode=0o4775), b"#!/bin/sh\n"),
                           (_info("top/sub/data.bin"), bytes(range(256)) * 5000),
                           (_info("top/sub/again.bin", tarfile.LNKTYPE, "top/sub/data.bin"), b""),
                           (_info("top/latest", tarfile.SYMTYPE, "sub/data.bin"), b"")]:
            info.size, info.mtime = len(data), 1_600_000_000
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    archive.write_bytes(buf.getvalue())
    made = extract.extract(archive, tmp_path / "out", extract.Budget(2 << 20, "test limit"))  # 1.3 MB in 5 kB
    top = tmp_path / "out" / "top"
    assert made == [top / "run.sh", top / "sub" / "data.bin"]
    assert (top / "latest").read_bytes() == (top / "sub" / "again.bin").read_bytes() == bytes(range(256)) * 5000
    assert (top / "sub" / "again.bin").stat().st_ino == (top / "sub" / "data.bin").stat().st_ino
    assert stat.S_IMODE((top / "run.sh").stat().st_mode) == 0o755  # no set-uid, no group write
    assert (top / "sub" / "data.bin").stat().st_mtime == 1_600_000_000


def test_tree_never_opens_a_folder_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "sneaky").symlink_to(tmp_path / "outside")
    with Tree(tmp_path / "dest") as tree, pytest.raises(ValueError, match="'sneaky', which is a symbolic link"):
        tree.write_file(("sneaky", "x"), io.BytesIO(b"x"), 0o644, None, lambda n: None)
    assert not list((tmp_path / "outside").iterdir())


@pytest.mark.parametrize("name, problem", [
    ("../x", "'..' component"), ("a/../../x", "'..' component"), ("/etc/x", "absolute path"),
    ("\\x", "absolute path"), ("C:/x", "absolute path"), ("a\\..\\..\\x", "'..' component"),
])
def test_hostile_zip_names_are_refused(tmp_path: Path, name: str, problem: str) -> None:
    archive = tmp_path / "hostile.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("fine.txt", b"fine")
        zf.writestr(zipfile.ZipInfo(name), b"x")
    with pytest.raises(extract.UnsafeArchiveError, match=rf"hostile\.zip: member {re.escape(repr(name))}.*{problem}"):
        extract.extract(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "fine.txt").exists()
    assert sorted(tmp_path.iterdir()) == [archive, tmp_path / "out"]


# --- decompression bombs ----------------------------------------------------------------------------------

def zeros_zip(size: int = GiB, name: str = "zeros.bin") -> bytes:
    """A valid zip of ``size`` zeros in one deflated member (~1 MB for 1 GiB): one MiB of zeros deflated
    after a full flush always gives the same bytes, so the stream is that block repeated, then an empty
    final block."""
    block = 1 << 20
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(bytes(block)) + c.flush(zlib.Z_FULL_FLUSH)
    repeat = c.compress(bytes(block)) + c.flush(zlib.Z_FULL_FLUSH)
    assert repeat == c.compress(bytes(block)) + c.flush(zlib.Z_FULL_FLUSH)
    stream = first + repeat * (size // block - 1) + b"\x01\x00\x00\xff\xff"
    crc = 0
    for _ in range(size // block):
        crc = zlib.crc32(bytes(block), crc)
    raw = name.encode()
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(stream), size, len(raw), 0) + raw
    central = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, crc, len(stream), size, len(raw),
                          0, 0, 0, 0, 0o100644 << 16, 0) + raw
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local) + len(stream), 0)
    return local + stream + central + end


@pytest.fixture(scope="module")
def bomb() -> bytes:
    with zipfile.ZipFile(io.BytesIO(zeros_zip(4 << 20))) as zf:  # the construction, checked small (CRC too)
        assert zf.read("zeros.bin") == bytes(4 << 20)
    data = zeros_zip()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.getinfo("zeros.bin").file_size == GiB and len(data) < 1_100_000
    return data


def test_a_zip_bomb_stops_at_the_budget_naming_archive_and_member(tmp_path: Path, bomb: bytes) -> None:
    archive = tmp_path / "bomb.zip"
    archive.write_bytes(bomb)
    limit = 8 << 20
    with pytest.raises(extract.ArchiveTooLargeError,
                       match=rf"bomb\.zip: member 'zeros\.bin' takes the extracted files past {limit} bytes \(test"):
        extract.extract(archive, tmp_path / "out", extract.Budget(limit, "test limit"))
    assert (tmp_path / "out" / "zeros.bin").stat().st_size <= limit  # stopped before the chunk past the limit


def test_without_a_stated_size_an_archive_may_grow_a_hundredfold(tmp_path: Path, bomb: bytes) -> None:
    archive = tmp_path / "bomb.zip"
    archive.write_bytes(bomb)
    with pytest.raises(extract.ArchiveTooLargeError, match=r"past \d+ bytes \(100 x the archives' size"):
        extract.extract(archive, tmp_path / "out")
    assert (tmp_path / "out" / "zeros.bin").stat().st_size <= 100 * len(bomb)


def test_a_tar_of_many_empty_members_stops_at_the_budget(tmp_path: Path) -> None:
    # no data at all, but each entry an inode: the budget counts extract.ENTRY_BYTES per member
    archive = tmp_path / "inodes.tar.gz"
    archive.write_bytes(_tar(*[_info(f"e/{i}") for i in range(1000)]))
    limit = 100 * extract.ENTRY_BYTES
    with pytest.raises(extract.ArchiveTooLargeError, match=rf"inodes\.tar\.gz: member 'e/100' takes the extracted "
                                                           rf"files past {limit} bytes \(test limit; each member"):
        extract.extract(archive, tmp_path / "out", extract.Budget(limit, "test limit"))
    assert len(list((tmp_path / "out" / "e").iterdir())) == 100  # the member past the budget is not made


def test_a_gzip_bomb_stops_too(tmp_path: Path) -> None:
    archive = tmp_path / "day_0.gz"
    archive.write_bytes(gzip.compress(bytes(64 << 20), 1))
    with Tree(tmp_path / "out") as tree, \
            pytest.raises(extract.ArchiveTooLargeError, match=r"day_0\.gz: member 'day_0' takes the extracted files"):
        extract.gunzip(archive, tree, ("day_0",), extract.Budget(CHUNK * 4, "test limit"))


def test_a_bomb_in_a_recipe_stops_at_sizes_extracted_and_leaves_no_folder(server: src.Server, tmp_path: Path,
                                                                          bomb: bytes) -> None:
    files = {**src.minigo(), "checkpoint.tar.gz": bomb}  # sniffed as a zip whatever its name
    r = recipe.load("minigo", src.recipe_for("minigo", server, tmp_path, files, {"sizes": {"extracted": 16 << 20}}))
    root = tmp_path / "root"
    steps.download(r, root, tmp_path / "d.json", progressbar=False)
    steps.verify(r, root, tmp_path / "v.json")
    with pytest.raises(extract.ArchiveTooLargeError,
                       match=rf"checkpoint\.tar\.gz: member 'zeros\.bin' .* past {16 << 20} bytes "
                             r"\(sizes\.extracted in .*minigo\.dataset\.yaml; each member counts 4096 bytes "
                             r"besides its data\); stopped: a decompression bomb, or a size to raise there"):
        steps.extract(r, root, tmp_path / "e.json")
    assert sorted(p.name for p in root.iterdir()) == [".lock", "downloads", "recorded-checksums.sha256"]
    assert not (tmp_path / "e.json").exists()


# --- recipe fields that become paths ------------------------------------------------------------------------

def _recipe(tmp_path: Path, **change: object) -> Path:
    raw = {"dataset": "t", "sources": [{"file": "ok.tar", "url": "http://127.0.0.1:9/ok.tar"},
                                       {"file": "sums.json", "url": "http://127.0.0.1:9/sums.json"}],
           "extract": [{"archive": "ok.tar", "into": "."}], "prepare": {"python": "minigo"}}
    for key, value in change.items():
        section, _, field = key.partition("__")
        if section == "extract":
            raw["extract"] = [value]
        elif field:
            raw[section] = {**raw.get(section, {}), field: value}  # type: ignore[dict-item]
        else:
            raw[section] = value
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("change, message", [
    ({"extract": {"archive": "ok.tar", "into": "../../../ESC"}}, r"extract\[0\]: into '\.\./\.\./\.\./ESC' must stay"),
    ({"extract": {"archive": "ok.tar", "into": "/tmp/ESC"}}, r"extract\[0\]: into '/tmp/ESC' must stay inside"),
    ({"extract": {"archive": "ok.tar", "into": "a/../../ESC"}}, r"extract\[0\]: into 'a/\.\./\.\./ESC' must stay"),
    ({"extract": {"archive": "../ok.tar"}}, r"extract\[0\]: archive '\.\./ok\.tar' is not the file of any"),
    ({"extract": {"archive": "/etc/passwd"}}, r"extract\[0\]: archive '/etc/passwd' is not the file of any"),
    ({"extract": {"gunzip": "../../x.gz"}}, r"extract\[0\]: gunzip '\.\./\.\./x\.gz' is not the file of any"),
    ({"extract": {"archive": "ok.tar", "gunzip": "ok.tar"}}, r"extract\[0\]: .* must be \{archive: FILE\}"),
    ({"extract": {"archive": "ok.tar", "int0": "."}}, r"extract\[0\]: .* must be \{archive: FILE\}"),
    ({"extract": {"archive": "ok.tar", "nested": "yes"}}, r"extract\[0\]: nested 'yes' must be true or false"),
    ({"prepare__published_md5": "../../sums.json"}, r"prepare: published_md5 '\.\./\.\./sums\.json' is not the"),
    ({"prepare__chk": {"../../x": "sums.json"}}, r"prepare\.chk: folder '\.\./\.\./x' must stay inside the prep"),
    ({"prepare__chk": {"x": "/etc/passwd"}}, r"prepare\.chk: file '/etc/passwd' must stay inside the downloads"),
    ({"sources": [{"file": "../x", "url": "http://x"}]}, r"sources\[0\]: file '\.\./x' must stay inside the down"),
    ({"sources": [{"file": ".", "url": "http://x"}]}, r"sources\[0\]: file '\.' must stay inside the downloads"),
    ({"sizes": {"extracted": "lots"}}, r"sizes \{'extracted': 'lots'\} must map extracted and prepared to bytes"),
])
def test_recipe_fields_that_become_paths_are_judged(tmp_path: Path, change: dict, message: str) -> None:
    path = _recipe(tmp_path, **change)
    with pytest.raises(recipe.RecipeError, match=rf"^{re.escape(str(path))}: {message}"):
        recipe.load("minigo", path)


def test_planning_stops_on_a_recipe_whose_into_leaves_the_folder(tmp_path: Path) -> None:
    """Issue 23's recipe: {recipe: FILE} extracting into ../../../ESC stops planning (in this process, as the
    Snakefile's planning step runs it: a PlanningError, printed without a traceback), naming file, key and value."""
    work = tmp_path / "a" / "b" / "c" / "work"
    work.mkdir(parents=True)
    bad = _recipe(tmp_path, extract={"archive": "ok.tar", "into": "../../../ESC"})
    test_config = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    said = refused_by_planning(  # mlrepro/planning/prepare.py stops the DAG before any job
        work, test_config, {"only": ["minigo"], "benchmarks": {"minigo": {"data": {"recipe": str(bad)}}}},
        says=(f"{bad}: extract[0]: into '../../../ESC' must stay inside the extracted folder",))
    assert "RecipeError" not in said and "recipe.py" not in said  # the message, not a traceback into the loader
    assert not list(tmp_path.rglob("ESC")) and list(work.iterdir()) == []


def test_a_well_formed_recipe_still_loads(tmp_path: Path) -> None:
    r = recipe.load("minigo", _recipe(tmp_path, extract={"archive": "ok.tar", "into": "sub/dir", "nested": True},
                                      prepare__published_md5="sums.json", prepare__chk={"a/b": "sums.json"}))
    assert r.extract == [{"archive": "ok.tar", "into": "sub/dir", "nested": True}]


def test_published_checksums_never_reach_outside_the_prepared_folder(tmp_path: Path) -> None:
    """KiTS19's checksum.json is downloaded: a name in it that leaves the prepared folder is an error, even
    when the file it reaches has the listed md5."""
    (tmp_path / "downloads").mkdir()
    (tmp_path / "prepared").mkdir()
    (tmp_path / "secret.txt").write_bytes(b"secret")
    listed = {"../secret.txt": hashlib.md5(b"secret").hexdigest()}
    (tmp_path / "downloads" / "checksum.json").write_text(json.dumps(listed))
    r = recipe.Recipe("unet3d", tmp_path / "r.yaml", "KiTS19", "/data", [], [], {"published_md5": "checksum.json"})
    with pytest.raises(prepare.PrepareError, match=r"'\.\./secret\.txt': not a name inside the prepared folder"):
        prepare.check_published(r, tmp_path / "downloads", tmp_path / "prepared")
