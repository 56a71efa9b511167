"""A stand-in for pyxis, for tests/test_gpu_cluster.py only: pyxis (NVIDIA's SPANK plugin that adds srun's
``--container-*`` options) and enroot cannot be installed on CI's machine. It is test code: never shipped, never
used by the pipeline, which knows nothing of it.

``tests/pyxis_standin/bin`` goes first on PATH (in the environment of the Snakemake process, so of every job and
step); its ``srun`` runs this file. A call without a ``--container-*`` option is handed to the real srun (the next
``srun`` on PATH) as it is. A call with them is handed to the real srun with those options taken out and each task
started through this file again (``task``), which does what pyxis does for the task on its node:

- ``--container-image=IMAGE --container-name=NAME``: the container NAME is made on this node (once: a name that
  exists is reused, as pyxis reuses it); ``--container-name`` without an image needs a container of that name on
  this node, made by an earlier step, else the task fails with pyxis' message. So a run.sub that forgot its import
  step on some node fails there, as it would with pyxis.
- ``--container-mounts=SRC:DST[:FLAGS],...``: each task runs in a mount namespace of its own where SRC is bound at
  DST (``ro`` read-only); a SRC that does not exist fails the task, as enroot fails it.
- ``--container-workdir=DIR``: the task starts in DIR (a DIR missing in the container fails it).
- ``--container-env``, ``--container-remap-root``, ``--[no-]container-mount-home``, ``--container-writable``,
  ``--container-readonly``, ``--[no-]container-entrypoint``: accepted and recorded.

The image: the container's root is a tmpfs holding the host's own top-level folders (bound), so the image's
programs are the host's (the test's venv Python), plus an image root where the test gives one: an IMAGE that is
a folder, or a registry reference or ``.sqsh`` file that ``$MLREPRO_PYXIS_STANDIN_IMAGES`` (a JSON file, IMAGE to
folder) names, is a container root (the test's own folder): each of its top-level folders that the host lacks
(its ``/workspace``) is bound at the root, and its ``image.json`` (``{"env": {...}, "workdir": "..."}``, as an
OCI image's config gives ENV and WORKDIR) gives the container's environment (the image's values win over the
task's, except for the names of ``--container-env``, as pyxis does) and its default workdir. Without an image
root the environment is the task's own and the default workdir its current folder. A missing mount point is
made in the container, never in a host folder: where it would be, that folder is shadowed in the container (a
tmpfs holding its entries, bound); one inside another mount is refused, naming it.

``tests/pyxis_standin/bin`` also holds a node's ``enroot`` (``import``: a ``.sqsh`` that names the image's
root; ``list``, ``remove``: the named containers this stand-in made on the node) and ``sudo`` (the tests run as
root: the command as it is), which NVIDIA's run.sub files (and the pipeline's image import) call outside any
container and CI's machine lacks.

Each container task appends one JSON line to ``$MLREPRO_PYXIS_STANDIN_STATE/<host>/steps.jsonl`` (host, job,
step, rank, container name, image, mounts, workdir, flags, command, whether the container was made here), which
the test reads besides Slurm's own records. That folder must be a private one (mode 0700) of the user's.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

STATE_ENV = "MLREPRO_PYXIS_STANDIN_STATE"
IMAGES_ENV = "MLREPRO_PYXIS_STANDIN_IMAGES"
HERE = Path(__file__).resolve().parent
# pyxis' options: those that take a value, and the flags
VALUED = ("--container-image", "--container-mounts", "--container-workdir", "--container-name", "--container-save",
          "--container-env")
FLAGS = ("--container-mount-home", "--no-container-mount-home", "--container-remap-root", "--no-container-remap-root",
         "--container-entrypoint", "--no-container-entrypoint", "--container-writable", "--container-readonly")
HELP = """
Options provided by plugins:
      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH
                              [pyxis] the image to use for the container filesystem
      --container-mounts=SRC:DST[:FLAGS][,SRC:DST...]
                              [pyxis] bind mount[s] inside the container
      --container-workdir=PATH
                              [pyxis] working directory inside the container
      --container-name=NAME   [pyxis] name to use for saving and loading the container on the host
      --container-env=NAME[,NAME...]
                              [pyxis] names of environment variables to override with the host environment
      --[no-]container-mount-home, --[no-]container-remap-root, --[no-]container-entrypoint,
      --container-writable, --container-readonly
                              [pyxis] (test stand-in: tests/pyxis_standin/pyxis_standin.py)
"""
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18


def fail(message: str) -> None:
    print(f"pyxis: error: {message}", file=sys.stderr)
    sys.exit(1)


def real_srun() -> str:
    """The next srun on PATH after this stand-in's."""
    own = (HERE / "bin").resolve()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / "srun"
        if candidate.resolve().parent != own and os.access(candidate, os.X_OK) and candidate.is_file():
            return str(candidate)
    fail("no real srun on PATH after the stand-in's")
    raise AssertionError


def srun_options(srun: str) -> tuple[set[str], set[str]]:
    """srun's own options that take a value: (long names, short letters), read from its --help (``--name=x``:
    required; ``--name[=x]``: optional, so it takes no separate word). Slurm's ``--container PATH`` (OCI bundles)
    says no ``=`` there but takes one."""
    text = subprocess.run([srun, "--help"], capture_output=True, text=True, check=False).stdout
    longs, shorts = {"--container"}, set()
    for m in re.finditer(r"^\s+(?:-(\w), )?(--[\w-]+)(=|\[=)?", text, re.MULTILINE):
        if m.group(3) == "=":
            longs.add(m.group(2))
            if m.group(1):
                shorts.add(m.group(1))
    return longs, shorts


def split_srun(args: list[str], longs: set[str], shorts: set[str]) -> tuple[list[str], dict[str, Any], list[str]]:
    """srun's options without pyxis', pyxis' options, and the command."""
    kept: list[str] = []
    pyxis: dict[str, Any] = {"flags": []}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return kept, pyxis, args[i + 1:]
        if not a.startswith("-") or a == "-":
            return kept, pyxis, args[i:]
        name = a.split("=", 1)[0]
        if name in VALUED:
            if "=" in a:
                value = a.split("=", 1)[1]
            else:
                if i + 1 >= len(args):
                    fail(f"option {name} needs a value")
                i += 1
                value = args[i]
            pyxis[name.removeprefix("--").replace("-", "_")] = value
        elif name in FLAGS:
            pyxis["flags"].append(name)
        elif a.startswith("--"):
            kept.append(a)
            if "=" not in a and name in longs and i + 1 < len(args):
                i += 1
                kept.append(args[i])
        else:  # short options, perhaps several, the last one perhaps with its value attached
            kept.append(a)
            for j, letter in enumerate(a[1:]):
                if letter in shorts:
                    if j == len(a) - 2 and i + 1 < len(args):
                        i += 1
                        kept.append(args[i])
                    break
        i += 1
    return kept, pyxis, []


def main_srun(args: list[str]) -> None:
    srun = real_srun()
    longs, shorts = srun_options(srun)
    kept, pyxis, command = split_srun(args, longs, shorts)
    if any(a in ("--help", "-h", "--usage") for a in kept):
        out = subprocess.run([srun, *kept], capture_output=True, text=True, check=False)
        sys.stdout.write(out.stdout + HELP)
        sys.stderr.write(out.stderr)
        sys.exit(out.returncode)
    if len(pyxis) == 1 and not pyxis["flags"]:
        os.execv(srun, [srun, *args])
    if not command:
        fail("srun with --container-* options needs a command")
    if "container_save" in pyxis:
        fail("--container-save is not supported by the test stand-in")
    task = [sys.executable, "-I", str(Path(__file__).resolve()), "task", json.dumps(pyxis), "--", *command]
    os.execv(srun, [srun, *kept, *task])


def private_folder(path: Path) -> Path:
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        fail(f"{STATE_ENV}={path} must be a folder of uid {os.getuid()} with mode 0700 (it is uid {st.st_uid}, "
             f"mode {stat.filemode(st.st_mode)})")
    return path


def mounts(spec: str) -> list[tuple[str, str, bool]]:
    """pyxis' ``SRC:DST[:FLAGS]`` list: (source, target, read-only)."""
    out = []
    for entry in filter(None, spec.split(",")):
        parts = entry.split(":")
        if len(parts) > 3:
            fail(f"invalid mount '{entry}' in --container-mounts")
        src, dst = parts[0], parts[1] if len(parts) > 1 and parts[1] else parts[0]
        flags = parts[2].split("+") if len(parts) == 3 else []
        out.append((src, dst, "ro" in flags))
    return out


_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: Path, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if v is None else str(v).encode() for v in (source, target, fstype, data)]
    if _libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        err = ctypes.get_errno()
        fail(f"mount {source} on {target}: {os.strerror(err)}")


def shadow(root: Path, folder: str) -> None:
    """The host folder ``/folder`` in the container, made writable without writing to the host: a tmpfs at its
    place holding each of its entries, bound (a container's folders are its own, as enroot's root file system)."""
    inner = root / folder
    _mount("tmpfs", inner, "tmpfs", 0, "mode=0755")
    for entry in os.scandir("/" + folder):
        target = inner / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
            continue
        target.mkdir() if entry.is_dir() else target.touch()
        _mount(entry.path, target, None, MS_BIND | MS_REC)


def mount_point(root: Path, dst: str, is_dir: bool, host: list[str], mounted: list[str]) -> Path:
    """The target of a mount inside the container's root, made where it is missing: in the root's own tmpfs, in an
    image's folder, or in a host folder shadowed for it (:func:`shadow`); never inside another mount."""
    target = root / dst.lstrip("/")
    if target.exists():
        return target
    rel = Path(dst.lstrip("/"))
    inside = [m for m in mounted if rel.parts[:len(Path(m).parts)] == Path(m).parts]
    if inside:
        fail(f"cannot make mount point {dst}: its folder {'/' + inside[0]} is another mount's, and the test "
             "stand-in writes into none; mount at a path outside the other mounts")
    if rel.parts[0] in host:
        parent = rel.parent
        while not (root / parent).exists():
            parent = parent.parent
        shadow(root, str(parent))
    target.parent.mkdir(parents=True, exist_ok=True)
    if is_dir:
        target.mkdir(exist_ok=True)  # the tasks of every node may make it at once in the image's folder
    else:
        target.touch()
    return target


def image_root(image: str) -> Path | None:
    """The container root of IMAGE: a folder, or the one $MLREPRO_PYXIS_STANDIN_IMAGES names for it; else none."""
    if os.path.isdir(image):
        return Path(image).resolve()
    if image.endswith(".sqsh") and os.path.isfile(image):  # made by this stand-in's enroot import
        root = json.loads(Path(image).read_text())["root"]
        return Path(root) if root else None
    table = os.environ.get(IMAGES_ENV)
    if table:
        named = json.loads(Path(table).read_text()).get(image)
        if named:
            return Path(named).resolve()
    return None


def image_config(image: Path | None) -> dict[str, Any]:
    config = image / "image.json" if image else None
    return json.loads(config.read_text()) if config and config.is_file() else {}


def enter(root: Path, spec: dict[str, Any], image: Path | None) -> str:
    """This process into a mount namespace of its own whose root is ``root``: the host's top-level folders, the
    image's own top-level folders, then the container's mounts; the working folder to start in."""
    if _libc.unshare(CLONE_NEWNS) != 0:
        fail(f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())} (the stand-in needs root)")
    _mount(None, Path("/"), None, MS_REC | MS_PRIVATE)
    root.mkdir(parents=True, exist_ok=True)
    _mount("tmpfs", root, "tmpfs", 0, "mode=0755")
    bound: list[str] = []
    for entry in os.scandir("/"):
        inner = root / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), inner)
        elif entry.is_dir():
            inner.mkdir()
            _mount(entry.path, inner, None, MS_BIND | MS_REC)
            bound.append(entry.name)
        else:
            inner.touch()
            _mount(entry.path, inner, None, MS_BIND)
    if image is not None:
        for entry in os.scandir(image):
            if entry.is_dir(follow_symlinks=False) and entry.name not in bound:
                (root / entry.name).mkdir()
                _mount(entry.path, root / entry.name, None, MS_BIND | MS_REC)  # the test's own: mount points go there
    mounted: list[str] = []
    for src, dst, read_only in mounts(spec.get("container_mounts", "")):
        if not os.path.exists(src):
            fail(f"mount source {src} (--container-mounts {src}:{dst}) does not exist")
        target = mount_point(root, dst, os.path.isdir(src), bound, mounted)
        _mount(src, target, None, MS_BIND | MS_REC)
        if read_only:
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        mounted.append(dst.strip("/"))
    workdir = spec.get("container_workdir") or image_config(image).get("workdir") or os.getcwd()
    os.chroot(root)
    try:
        os.chdir(workdir)
    except OSError as e:
        fail(f"--container-workdir {workdir}: {e.strerror}")
    return workdir


def main_task(spec_json: str, command: list[str]) -> None:
    spec = json.loads(spec_json)
    if STATE_ENV not in os.environ:
        fail(f"{STATE_ENV} is not set: the test that puts the stand-in on PATH names a private folder for its state")
    host = socket.gethostname()
    node = private_folder(Path(os.environ[STATE_ENV])) / host
    node.mkdir(mode=0o700, exist_ok=True)
    image, name = spec.get("container_image"), (spec.get("container_name") or "").split(":")[0]
    if name and not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        fail(f"invalid container name '{name}'")
    made = False
    ids = f"{os.environ.get('SLURM_JOB_ID', 'nojob')}.{os.environ.get('SLURM_STEP_ID', 'nostep')}"
    if name:
        folder = node / "containers" / name
        if not (folder / "image").is_file():
            if not image:
                fail(f"a container with name '{name}' does not exist, and --container-image is not set")
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f"image.{os.getpid()}"
            tmp.write_text(image)
            tmp.replace(folder / "image")  # tasks of one node may make it at once: one wins, whole
            made = True
        image = (folder / "image").read_text()
        root = folder / "rootfs"
    elif image:
        root = node / "unnamed" / f"{ids}.{os.environ.get('SLURM_PROCID', '0')}"
        made = True
    else:
        fail("--container-* options need --container-image or --container-name")
        raise AssertionError
    rootfs = image_root(image) if image else None
    workdir = enter(root, spec, rootfs)
    # the image's environment wins over the task's, except for the names of --container-env (pyxis)
    keep = set(filter(None, (spec.get("container_env") or "").split(",")))
    env = {**os.environ, **{k: v for k, v in image_config(rootfs).get("env", {}).items() if k not in keep}}
    record = {"host": host, "job": os.environ.get("SLURM_JOB_ID"), "step": os.environ.get("SLURM_STEP_ID"),
              "rank": os.environ.get("SLURM_PROCID"), "local_rank": os.environ.get("SLURM_LOCALID"),
              "name": name or None, "image": image, "made": made, "mounts": mounts(spec.get("container_mounts", "")),
              "root": str(rootfs) if rootfs else None,
              "workdir": workdir, "env": spec.get("container_env"), "flags": spec["flags"], "command": command}
    # one line, one write, O_APPEND: the tasks of a node append at once (the host's folder is bound in the root)
    fd = os.open(node / "steps.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        fail(f"{command[0]}: {e.strerror}")


def enroot_import(args: list[str]) -> None:
    """``enroot import [--arch A] --output FILE docker://[REGISTRY#]IMAGE[:TAG]``: FILE, a stand-in squashfs naming
    the image's root ($MLREPRO_PYXIS_STANDIN_IMAGES's for the reference) and what was asked, recorded per node."""
    opts: dict[str, str] = {}
    rest = list(args)
    while rest and rest[0].startswith("-"):
        name = rest.pop(0)
        if name not in ("--arch", "-a", "--output", "-o") or not rest:
            fail(f"enroot import: option {name} is not supported by the test stand-in")
        opts[name.lstrip("-")[0]] = rest.pop(0)
    if len(rest) != 1 or not rest[0].startswith("docker://") or "o" not in opts:
        fail("enroot import: usage: enroot import [--arch ARCH] --output FILE docker://[REGISTRY#]IMAGE[:TAG]")
    uri = rest[0]
    ref = uri.removeprefix("docker://").replace("#", "/", 1)
    root = image_root(ref)  # None: an image without a root of its own (the host's folders only)
    out = Path(opts["o"])
    if out.exists():
        fail(f"enroot import: {out} already exists")
    out.write_text(json.dumps({"standin_sqsh": True, "uri": uri, "arch": opts.get("a"),
                               "root": str(root) if root else None}))
    node = private_folder(Path(os.environ[STATE_ENV])) / socket.gethostname()
    node.mkdir(mode=0o700, exist_ok=True)
    with (node / "imports.jsonl").open("a") as f:
        f.write(json.dumps({"host": socket.gethostname(), "job": os.environ.get("SLURM_JOB_ID"), "argv": args}) + "\n")


def main_enroot(args: list[str]) -> None:
    """enroot's ``import`` (:func:`enroot_import`), ``list`` and ``remove [-f] NAME...`` of this node's named
    containers (run.sub's cleanup_pyxis)."""
    if STATE_ENV not in os.environ:
        fail(f"{STATE_ENV} is not set")
    folder = private_folder(Path(os.environ[STATE_ENV])) / socket.gethostname() / "containers"
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if args[:1] == ["import"]:
        enroot_import(args[1:])
    elif args[:1] == ["list"]:
        print("\n".join(names), end="\n" if names else "")
    elif args[:1] == ["remove"]:
        for name in (a for a in args[1:] if not a.startswith("-")):
            if name not in names:
                fail(f"enroot remove: no container {name!r}")
            for entry in sorted((folder / name).rglob("*"), reverse=True):
                entry.rmdir() if entry.is_dir() else entry.unlink()
            (folder / name).rmdir()
    else:
        fail(f"enroot {' '.join(args[:1])}: not supported by the test stand-in (list, remove)")


def main(argv: list[str]) -> None:
    if argv[:1] == ["srun"]:
        main_srun(argv[1:])
    elif argv[:1] == ["enroot"]:
        main_enroot(argv[1:])
    elif argv[:1] == ["task"] and len(argv) >= 4 and argv[2] == "--":
        main_task(argv[1], argv[3:])
    else:
        fail("usage: pyxis_standin.py srun ARGS... | enroot ARGS... | task SPEC -- COMMAND...")


if __name__ == "__main__":
    main(sys.argv[1:])
