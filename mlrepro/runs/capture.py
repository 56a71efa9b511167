"""A config file's captured environment: the one reader of ``config_<SYSTEM>.sh``, ours and vendors' alike.

A config file is a shell script: only bash knows what it exports. It is sourced by bash in a clean environment
(``set -a``: plain assignments too), in a job, never while the DAG is built: the pipeline's ``capture`` rule
(rules/runs.smk) sources it natively, or, for a reproduction (rules/reproduce.smk), its staged copy in the package's
image where a container engine is configured. The job writes a :class:`Record` (what bash exported, less what bash
and the clean environment set themselves; the files the config file sourced) to a JSON file, atomically; planning
reads that file (mlrepro/planning/captures.py), and nothing of the config file is interpreted anywhere else.

The pipeline's records are named by :func:`key`: what a capture reads, as content (the folder's files, the config
file's name, the clean environment, this module's VERSION), so that a changed file of the folder makes a new record
(its capture job runs, then every run that reads it), while a touched file, a moved folder or a new working folder
makes none. Two things a capture reads are not in its folder, and its folder's first record names them: the files it
sourced from outside its folder (their content then joins the key, once it differs from what the record holds) and
the folder's own path (it joins the key where the record's variables name the folder, which then has moved).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrepro.containers.context import context_digest, folder_files
from mlrepro.core import safe_read, untrusted_dir
from mlrepro.core.errors import MlreproError
from mlrepro.core.hashing import sha256_file

VERSION = 1  # of the record and of the script: a change makes every key new, so every config file is captured again
# The clean environment a config file is sourced in; NEXP=1: one run per job (NVIDIA's run.sub sets it).
CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "NEXP": "1"}
MAX_RECORD = 8 << 20  # bytes of a record read back (config files export a few hundred variables at most)
# bash's builtins only (an image need not have env): every exported name, NUL-separated as env -0 prints them, before
# and after the config file is sourced. ``source`` and ``.`` are wrapped to record the files it sources (with the
# folder they are sourced from) and then do what the builtins do; the wrappers are defined before ``set -a`` and so
# are not exported. The config file sees the positional parameters it always saw: its own path.
SCRIPT = r"""__mlrepro_out=$2; set -- "$1"
__mlrepro_dump() {
  local v IFS=$' \t\n'; for v in $(builtin compgen -e); do builtin printf '%s=%s\0' "$v" "${!v}"; done
}
__mlrepro_where() {
  local f=$1 d IFS=:
  if [[ $f != */* ]] && builtin shopt -q sourcepath; then
    for d in $PATH; do [[ -f ${d:-.}/$f ]] && { builtin printf '%s\0%s\0' "$PWD" "${d:-.}/$f"; return; }; done
  fi
  builtin printf '%s\0%s\0' "$PWD" "$f"
}
source() { __mlrepro_where "$1" >> "$__mlrepro_out/sourced"; builtin source "$@"; }
.() { __mlrepro_where "$1" >> "$__mlrepro_out/sourced"; builtin . "$@"; }
: > "$__mlrepro_out/sourced"
__mlrepro_dump > "$__mlrepro_out/base"
set -a
builtin source "$1" >&2
set +aeu
__mlrepro_dump > "$__mlrepro_out/env"
"""
RUN_AGAIN = "Fix the config file, or choose another with benchmarks.<bm>.system_config"


class CaptureError(MlreproError, ValueError):
    """A config file that cannot be captured, or a record that cannot be read; the message names the file and what
    to do."""


@dataclass(frozen=True)
class Record:
    config_file: str  # the config file as bash sourced it
    folder: str  # its implementation folder
    env: dict[str, str]  # what it exports (set -a: its plain assignments too)
    sourced: dict[str, str] = field(default_factory=dict)  # files it sourced -> their sha256 when captured

    def names_folder(self) -> bool:
        """Whether a variable's value names the folder: the record then belongs to the folder's path too."""
        folder = self.folder.rstrip("/")
        return any(folder in value for value in self.env.values())

    def outside(self) -> dict[str, str]:
        """The sourced files outside the folder (a file inside is part of the folder's content)."""
        inside = self.folder.rstrip("/") + "/"
        return {path: sha for path, sha in self.sourced.items() if not path.startswith(inside)}

    def to_json(self) -> str:
        return json.dumps({"version": VERSION, "config_file": self.config_file, "folder": self.folder,
                           "env": self.env, "sourced": self.sourced}, sort_keys=True, indent=1) + "\n"


def write(record: Record, out: Path) -> None:
    """Atomically, mode 644 whatever the umask, no link followed: :func:`read` trusts only such a file of this user."""
    out.parent.mkdir(parents=True, exist_ok=True)
    untrusted_dir.write_text(out.parent, out.name, record.to_json())


def read(path: Path) -> Record:
    """A record a capture job wrote. FileNotFoundError (with ``path`` as given) where it has not run yet: while the
    DAG is built, Snakemake takes that for a value to be known once the job that writes it has run. A record is
    trusted only as this user's regular file that no one else can write (an output folder may be group-writable): its
    variables become every run's environment. Another's is refused, naming who wrote it."""
    Path(path).stat()  # FileNotFoundError, as given, where its job has not run
    try:
        text = untrusted_dir.read_record(Path(path), MAX_RECORD).decode("utf-8")
    except untrusted_dir.PlantedLink as e:
        raise CaptureError(f"config file capture record {e}") from None
    except UnicodeDecodeError:
        text = ""
    try:
        doc = json.loads(text)
        env, sourced = doc["env"], doc.get("sourced", {})
        ok = (doc.get("version") == VERSION and isinstance(env, dict) and isinstance(sourced, dict)
              and all(isinstance(k, str) and isinstance(v, str) for d in (env, sourced) for k, v in d.items()))
        record = Record(str(doc["config_file"]), str(doc["folder"]), env, sourced) if ok else None
    except (ValueError, KeyError, TypeError):
        record = None
    if record is None:
        raise CaptureError(f"{path}: not a config file's capture record (version {VERSION}); remove it, and its "
                           "capture job runs again")
    return record


def parse_env0(data: bytes) -> dict[str, str]:
    """The variables ``env -0`` (or the script's dump) printed."""
    env = {}
    for item in data.split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep:
            env[key] = value
    return env


def _sourced(data: bytes) -> list[Path]:
    """The files the script recorded, each (folder it was sourced from, path as given) made absolute."""
    words = [w.decode(errors="surrogateescape") for w in data.split(b"\0")[:-1]]
    pairs = zip(words[::2], words[1::2], strict=True)
    return [Path(os.path.realpath(os.path.join(pwd, given))) for pwd, given in pairs]


def _from_dumps(config: Path, out: Path, hashed: bool) -> Record:
    base, env = (parse_env0(safe_read.read_bytes(out / name, out)) for name in ("base", "env"))
    sourced = _sourced(safe_read.read_bytes(out / "sourced", out))
    # what bash itself sets (PWD, SHLVL, _) and the clean environment's own values, unless the file changes them
    captured = {k: v for k, v in env.items() if k != "_" and base.get(k) != v}
    hashes = {str(p): sha256_file(p) for p in sourced if p.is_file()} if hashed else {}
    return Record(str(config), str(config.parent), captured, hashes)


def source_native(config: Path) -> Record:
    """``config`` sourced by bash here, in the clean environment, from its folder."""
    config_exists(config)
    with tempfile.TemporaryDirectory(prefix="mlrepro-capture-") as tmp:
        proc = subprocess.run(["bash", "-c", SCRIPT, "bash", str(config.resolve()), tmp], cwd=config.parent,
                              env=CLEAN_ENV, capture_output=True, check=False)
        if proc.returncode != 0 or not (Path(tmp) / "env").is_file():
            stderr = proc.stderr.decode(errors="replace").strip()[-2000:]
            raise CaptureError(f"{config}: sourcing it with bash failed (exit {proc.returncode}):\n{stderr}\n"
                               f"{RUN_AGAIN}.")
        return _from_dumps(config, Path(tmp), hashed=True)


def source_in_image(image_record: Path, config: Path, staged: Path) -> Record:
    """``config`` (inside the staged copy ``staged``) sourced by bash in the image of ``image_record``, as
    :func:`source_native` does here; only the staged copy (read-only) and a folder for the dumps are mounted. The
    files it sources are the image's: their paths are recorded, not their content."""
    from mlrepro.containers.lock import image_ref
    from mlrepro.engines import Mount, engine_for

    config_exists(config)
    with tempfile.TemporaryDirectory(prefix=".capture.", dir=staged.parent) as tmp:
        out, log = Path(tmp), Path(tmp) / "bash.log"
        code = engine_for("", image_record).run(
            ["bash", "-c", SCRIPT, "bash", str(config), "/capture"], image=image_ref(image_record, locked=False),
            mounts=[Mount(staged, read_only=True), Mount(out, read_only=False, target="/capture")], gpus=[],
            env=CLEAN_ENV, log=log, workdir=str(config.parent))
        if code != 0 or not (out / "env").is_file():
            raise CaptureError(f"{config}: sourcing it with bash in its image failed (exit {code}):\n"
                               f"{log.read_text(errors='replace').strip()[-2000:]}\n{RUN_AGAIN}.")
        try:  # regular files inside the folder only: the config file may have put links to host files there
            return _from_dumps(config, out, hashed=False)
        except safe_read.UnsafeInput as e:
            raise CaptureError(f"{config}: sourced in its image, it left {e}") from None


def config_exists(config: Path) -> None:
    """CaptureError, naming the folder's config files, where ``config`` is none."""
    if not config.is_file():
        there = ", ".join(sorted(p.name for p in config.parent.glob("config_*.sh"))) or "none"
        raise CaptureError(f"{config}: no such config file; set benchmarks.<bm>.system_config to one of the "
                           f"folder's config_<SYSTEM>.sh files (there: {there})")


# --- keys: a record's name is what its capture read
def folder_digest(folder: Path) -> str:
    """The content of an implementation folder: each file's path and sha256, as its image's build context."""
    return context_digest("", folder, folder_files(folder))


def _digest(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def _content(path: str) -> str:
    return sha256_file(Path(path)) if Path(path).is_file() else "missing"


def key(folder: Path, config_name: str, files_digest: str, record_of: Callable[[str], Record | None]) -> str:
    """The name of the record of ``folder``'s config file ``config_name`` as it is now (``files_digest``:
    :func:`folder_digest`); ``record_of(name)``: the record of that name, if one was written. Only reads."""
    base = _digest({"version": VERSION, "config_file": config_name, "files": files_digest, "clean_env": CLEAN_ENV})
    first = record_of(base)
    if first is None:
        return base
    extra: dict[str, Any] = {}
    if first.folder != str(folder) and first.names_folder():
        extra["folder"] = str(folder)
    now = {path: _content(path) for path in first.outside()}
    if now != first.outside():
        extra["sourced"] = now
    return _digest({"base": base, **extra}) if extra else base
