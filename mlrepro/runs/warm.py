"""Warm start for the project's own native runs: one parent per Snakemake invocation and host that has
imported torch and the training code once, and forks one fresh child per run (a zygote).

Why: ``import torch`` costs each run 2.6 to 3.5 s of CPU, more than many runs train. How it stays a
fresh run: the run still goes through its ``run_and_time.sh``; the driver only puts a ``python`` shim
first on the script's PATH. When the script ends in ``exec python -m mlrepro.train ARGS``, the shim
hands the parent ARGS, its environment (PATH without the shim), its working folder and its
stdin/stdout/stderr; the parent forks a child that takes them over and runs ``mlrepro.train`` as
``__main__`` with ``runpy``, as ``python -m`` would. The parent itself never trains, never touches
CUDA (it refuses to fork once CUDA is initialised) and keeps no state from a run, so each child
starts from the same imported state: its own MLLOG, its own seed. Anything else the shim is asked to
run, an interpreter setting that differs from the parent's (PYTHON*, OMP_*, ...), or no parent to
reach makes the shim exec the real interpreter: the cold path, exactly.

Lifetime: the parent serves one owner, the Snakemake process that parsed rules/runs.smk on this host
(``MLREPRO_WARM_OWNER`` = host:pid:start time), and exits within half a second of it, removing its
folder. Its folder (shim, socket, pid file, log) is one of the user's own, mode 0700, under
``$XDG_RUNTIME_DIR`` or ``~/.cache`` (mlrepro/core/private_dir.py), checked on every use by the driver,
the shim, ``hand_over`` and the parent itself: one owned by another user, open to others, a symlink or
not a folder is refused (the run goes cold, saying why); nothing is trusted because it exists. The
parent and its children run with ``-P`` semantics: the working folder is never put on ``sys.path``.
Under Slurm
each job's own Snakemake parses the workflow on its node, so a parent never serves another node.
The child dies with the parent (PR_SET_PDEATHSIG) and with the shim; the shim then exits non-zero,
so the run fails without a result and the next invocation redoes it.

The jobs that generate a dataset (``mlrepro.datasets.generated``) and that run LoadGen (``mlrepro.inference.run``)
are served the same way by parents of their own: a rule's job (mlrepro/jobs.py) sends the Job as JSON
(``hand_over_job``: the child calls the entry function on it), ``python -m`` its arguments (``hand_over``); each
waits for the exit status, and each imports torch once instead of once per job. The run driver is not: it imports no
torch (its telemetry is standard library, numpy and psutil), so a parent of its own would cost a process and a
socket hop per run for less than it saves (benchmarks/run_hops.py).

This module imports only the standard library at module level: the shim and the driver load it.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

OWNER_ENV = "MLREPRO_WARM_OWNER"
# where the parents' folders live: a folder of this user's, not writable by others (default: the user's
# runtime folder, mlrepro/core/private_dir.py)
DIR_ENV = "MLREPRO_WARM_DIR"
MODULE = "mlrepro.train"  # the training module a parent runs for the pipeline
# Other jobs of the pipeline that import torch and a workload, each served by its own parent: a
# generated dataset and a LoadGen run (neither is a training run; each still runs in a fresh child).
DATA = "mlrepro.datasets.generated"
INFERENCE = "mlrepro.inference.run"
# What a parent imports besides its module (which may import lazily), so that its children need not:
# each list is what a child imported on its own (a diff of sys.modules at its exit), costly ones first.
_PRELOAD = {
    # torch.use_deterministic_algorithms, which every run calls, imports torch._inductor (and
    # torch._dynamo): seconds of CPU per run, more than the import of torch itself; then torch.save
    # and the table torch._dynamo prints at exit
    MODULE: ("torch._inductor", "torch.utils.serialization", "tabulate"),
    # not mlperf_loadgen: a child must be the first of its process to use LoadGen's global state
    INFERENCE: ("torch", "mlrepro.inference.serve"),
}
# Settings an interpreter or a native library reads once at start: a child inherits the parent's, so
# a run that asks for others goes cold.
_START_KEYS = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "LD_", "MALLOC_", "OPENBLAS_", "TORCH_")
_PR_SET_PDEATHSIG = 1
# mlrepro.telemetry.host.ROOTS_ENV (a test holds them equal): importing the telemetry package would
# cost the shim about as much as the warm start saves.
ROOTS_ENV = "MLREPRO_TELEMETRY_ROOTS"


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ('' where /proc has none): with the pid it
    names one process, not a later one that reuses the pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def owner_here() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def alive(owner: str) -> bool:
    """The owner runs on this host and is still the same process."""
    host, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _start_time(int(pid)) == start


def parent_dir(owner: str, module: str = MODULE) -> Path:
    """One folder per owner, interpreter and served module: the shim, the socket, the parent's pid and
    log. Short, as a Unix socket's path must be. Only a name: :func:`private` makes and checks it."""
    from mlrepro.core import private_dir

    root = Path(os.environ[DIR_ENV]) if os.environ.get(DIR_ENV) else private_dir.base()
    key = f"{owner}\0{sys.executable}\0{os.environ.get('PYTHONPATH', '')}" + ("" if module == MODULE else f"\0{module}")
    return root / "warm" / hashlib.sha256(key.encode()).hexdigest()[:12]


def private(folder: Path) -> Path:
    """``folder`` (a parent's) made where missing and checked: this user's, mode 0700, in a folder of this
    user's that no one else can write; PrivateDirError (naming the folder and its owner) otherwise."""
    from mlrepro.core import private_dir

    private_dir.make(folder.parent)
    return private_dir.make(folder)


def _start_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_START_KEYS)}


# --- the driver's side ------------------------------------------------------------------------------

_SHIM = """#!{python} -I
# mlrepro's warm-start shim (mlrepro/runs/warm.py): `python -m mlrepro.train ...` through the warm parent.
import sys
sys.path.insert(0, {root!r})
from mlrepro.runs.warm import shim_main
shim_main({python!r})
"""


def shim_env(base_path: str) -> dict[str, str]:
    """The PATH that puts this invocation's shim before ``base_path``; {} where no warm parent may
    serve (no owner on this host, owner gone): the run then goes cold."""
    owner = os.environ.get(OWNER_ENV)
    if not owner or not alive(owner):
        return {}
    from mlrepro.core.private_dir import PrivateDirError

    try:
        folder = private(parent_dir(owner))
    except (PrivateDirError, OSError) as e:
        print(f"mlrepro.runs.warm: cold start: {e}", file=sys.stderr, flush=True)
        return {}
    shim = folder / "python"
    if not shim.is_file():
        from mlrepro import PACKAGE_ROOT
        from mlrepro.core import atomic
        atomic.write_text(shim, _SHIM.format(python=sys.executable, root=str(PACKAGE_ROOT)))
        shim.chmod(0o700)
    return {"PATH": os.pathsep.join([str(folder), base_path])}


REQUEST_TIMEOUT_S = 10.0  # a shim sends its request at once after connecting

# --- the shim ---------------------------------------------------------------------------------------

def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _lines(conn: socket.socket):  # type: ignore[no-untyped-def]
    buf = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield json.loads(line)


def _spawn(argv: list[str], env: dict[str, str], folder: Path) -> None:
    """Start the parent detached (fork, new session, start, exit), so that it is no descendant of this
    run: the run's telemetry follows the run's process tree."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            with open(folder / "parent.log", "ab") as log:
                subprocess.Popen(argv, env=env, cwd=str(folder), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 close_fds=True)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _connect(folder: Path, env: dict[str, str], module: str) -> socket.socket:
    """Reach the folder's parent; start it (one at a time, under a lock) when none answers."""
    path = str(folder / "parent.sock")

    def attempt() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        except OSError:
            s.close()
            raise
        return s

    try:
        return attempt()
    except OSError:
        pass
    with open(folder / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return attempt()
        except OSError:
            pass
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a dead parent's
        _spawn([sys.executable, "-P", "-m", "mlrepro.runs.warm", "--dir", str(folder), "--owner", env[OWNER_ENV],
                "--module", module], env, folder)
        deadline = time.monotonic() + 30
        while not os.path.exists(path):  # it binds before it imports anything heavy
            if time.monotonic() > deadline:
                raise OSError(f"no warm parent answered at {path}")
            time.sleep(0.01)
        return attempt()


def _add_root(pid: int) -> None:
    """Let the run's telemetry sampler follow the child: it is not a descendant of the run driver."""
    roots = os.environ.get(ROOTS_ENV)
    if roots:
        from mlrepro.core import atomic
        previous = Path(roots).read_text() if os.path.exists(roots) else ""
        atomic.write_text(Path(roots), f"{previous}{pid}\n")


def _through_parent(folder: Path, module: str, work: dict[str, Any], env: dict[str, str]) -> int | str:
    """Have the folder's parent do ``work`` with this process's stdio, working folder and ``env``: ``{"argv": ARGS}``
    runs ``python -m module ARGS``; ``{"entry": "pkg.mod:function", "job": JOB}`` calls the function on the job
    (its JSON: mlrepro/core/job.py). Returns the exit status, or (text) why it did not start there."""
    from mlrepro.core.private_dir import PrivateDirError

    try:
        private(folder)  # checked on every use: the socket, the lock and the log live there
        conn = _connect(folder, env, module)
        request = json.dumps({**work, "env": env, "cwd": os.getcwd()}).encode() + b"\n"
        socket.send_fds(conn, [request], [0, 1, 2])
        replies = _lines(conn)
        first = next(replies)
    except PrivateDirError as e:
        print(f"mlrepro.runs.warm: cold start: {e}", file=sys.stderr, flush=True)
        return str(e)
    except (OSError, StopIteration, ValueError) as e:
        return f"parent unreachable: {e}"
    if "cold" in first:
        return str(first["cold"])
    child = int(first["pid"])  # it leads its own process group: what a signal to this job reaches
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: os.killpg(child, s))
    _add_root(child)
    for message in replies:
        if "exit" in message:
            return int(message["exit"])
    with contextlib.suppress(OSError):  # what it started may outlive it: end it too
        os.killpg(child, signal.SIGKILL)
    print(f"mlrepro.runs.warm: the run's process {child} ended without an exit status (its warm parent "
          f"or the process itself was killed); the run has no result", file=sys.stderr, flush=True)
    return 1


def _debug(reason: str) -> None:
    if os.environ.get("MLREPRO_WARM_DEBUG"):
        print(f"mlrepro.runs.warm: cold start: {reason}", file=sys.stderr, flush=True)


def shim_main(python: str, module: str = MODULE) -> None:
    args = sys.argv[1:]
    folder = Path(sys.argv[0]).resolve().parent
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    if path and Path(path[0]).resolve() == folder:
        path = path[1:]
    env = {**os.environ, "PATH": os.pathsep.join(path)}
    reason = "not a run of " + module
    run = args[1:] if args[:1] == ["-P"] else args  # the parent runs with -P's import path, always
    if run[:2] == ["-m", module] and OWNER_ENV in env:
        served = _through_parent(folder, module, {"argv": run[2:]}, env)
        if isinstance(served, int):
            sys.exit(served)
        reason = served
    _debug(reason)
    os.execve(python, [python, *args], env)


_serving: str | None = None  # in a parent's child: the module it runs


def hand_over(module: str) -> None:
    """Run this ``python -m module`` invocation in the owner's warm parent for ``module`` and exit with its status;
    return (and let the caller run it here) where none may serve: no owner on this host, or already served."""
    status = _hand_over(module, {"argv": sys.argv[1:]})
    if status is not None:
        sys.exit(status)


def hand_over_job(module: str, entry: str, job: str) -> int | None:
    """Call ``entry`` ("pkg.mod:function") on ``job`` (its JSON, mlrepro/core/job.py) in the owner's warm parent for
    ``module``, with this process's stdio; its exit status, or None where none may serve (the caller runs it)."""
    return _hand_over(module, {"entry": entry, "job": job})


def _hand_over(module: str, work: dict[str, Any]) -> int | None:
    owner = os.environ.get(OWNER_ENV)
    if _serving is not None or not owner or not alive(owner):
        return None
    from mlrepro.core.private_dir import PrivateDirError

    try:
        folder = parent_dir(owner, module)
    except (PrivateDirError, OSError) as e:
        print(f"mlrepro.runs.warm: cold start: {e}", file=sys.stderr, flush=True)
        return None
    served = _through_parent(folder, module, work, dict(os.environ))
    if isinstance(served, int):
        return served
    _debug(served)
    return None


# --- the parent -------------------------------------------------------------------------------------

def _child(conn: socket.socket, request: dict[str, Any], fds: list[int], parent: int, module: str) -> None:
    """In the forked child: become the run's process, run the module as __main__, report the status."""
    global _serving
    _serving = module
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a new interpreter
    os.setpgid(0, 0)  # the requester's signals reach this process and what it starts
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _send(conn, {"pid": os.getpid()})

    def watch_shim() -> None:  # the requester is gone (killed with its job): so is the run
        with contextlib.suppress(OSError):
            conn.recv(1)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch_shim, daemon=True).start()
    import atexit
    import runpy
    import traceback

    # sys.path is the parent's, started with -P: the working folder (an audited round, a package) is never on
    # it, as in `python -P -m`, which is how every entry point of the project is started
    code: Any = 0
    try:
        if "job" in request:  # a job of the rules (mlrepro/jobs.py): the module is imported, its function called
            from mlrepro.core.job import Job, call

            code = call(request["entry"], Job.from_json(request["job"]))
        else:
            sys.argv = ["-m", *request["argv"]]  # runpy puts the module's file in argv[0], as python -m does
            sys.modules.pop(module, None)  # as in a new interpreter, the module runs once, as __main__ only
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # what the interpreter does at exit: loggers flush and close
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):
        _send(conn, {"exit": code})
    os._exit(code)


def _serve_one(conn: socket.socket, listener: socket.socket, start_env: dict[str, str], module: str) -> None:
    # The parent serves one connection at a time: a shim that connects and then sends nothing (stopped
    # with its job, say) must not keep every later run waiting. Past the limit it is dropped (its shim
    # then runs cold); the child gets the connection back in blocking mode for its exit message.
    conn.settimeout(REQUEST_TIMEOUT_S)
    msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    while not msg.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            raise OSError("the shim hung up")
        msg += more
    conn.settimeout(None)
    request = json.loads(msg)
    reason = None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # forking after CUDA initialisation is unsafe
        reason = "CUDA is initialised in the warm parent"
    elif _start_env(request["env"]) != start_env:
        reason = "the run's interpreter settings differ from the warm parent's"
    elif len(fds) != 3:
        reason = "the shim passed no stdin/stdout/stderr"
    if reason:
        for fd in fds:
            os.close(fd)
        _send(conn, {"cold": reason})
        return
    parent = os.getpid()
    if os.fork() == 0:
        try:
            listener.close()
            _child(conn, request, fds, parent, module)
        finally:
            os._exit(1)
    for fd in fds:
        os.close(fd)


def serve(folder: Path, owner: str, module: str = MODULE) -> None:
    """Bind first (the shim waits for the socket), import the training code, then fork per request."""
    private(folder)
    path = folder / "parent.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    partial = folder / f"parent.sock.{os.getpid()}"
    listener.bind(str(partial))
    inode = os.stat(partial).st_ino
    listener.listen(64)
    os.replace(partial, path)
    (folder / "parent.pid").write_text(f"{os.getpid()}\n")
    start_env = _start_env(dict(os.environ))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped: still remove the folder
    try:
        import importlib

        importlib.import_module(module)  # for training: torch, numpy, mllog and the loop
        for name in _PRELOAD.get(module, ()):
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        if module in (MODULE, DATA, INFERENCE):
            _import_workload_dependencies()
        while alive(owner):
            ready, _, _ = select.select([listener], [], [], 0.5)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            if ready:
                conn, _ = listener.accept()
                with conn:
                    try:
                        _serve_one(conn, listener, start_env, module)
                    except (OSError, ValueError) as e:
                        print(f"mlrepro.runs.warm: request failed: {e}", file=sys.stderr, flush=True)
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == inode:  # the folder is still this parent's: its owner is gone
                import shutil

                shutil.rmtree(folder, ignore_errors=True)


def _import_workload_dependencies() -> None:
    """Import what the minis' model.py files import (torchvision, ...), without running a model
    file: a model's own code runs only in the run's child."""
    import ast
    import importlib

    from mlrepro.core.minis import implemented_benchmarks, mini_dir

    for benchmark in implemented_benchmarks():
        tree = ast.parse((mini_dir(benchmark) / "model.py").read_text())
        for node in tree.body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for name in names:
                with contextlib.suppress(Exception):
                    importlib.import_module(name)


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m mlrepro.runs.warm", description=__doc__)
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--owner", required=True, help="host:pid:start of the Snakemake process served")
    p.add_argument("--module", default=MODULE, help="the module each child runs as __main__")
    args = p.parse_args(argv)
    with contextlib.suppress(SystemExit):  # stopped by SIGTERM: the folder is removed all the same
        serve(args.dir, args.owner, args.module)
    # Served and cleaned up: skip the interpreter's teardown of torch and the workloads, a second of
    # CPU per parent just when the owner has ended and the next Snakemake may be starting.
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


if __name__ == "__main__":
    from mlrepro.runs import warm  # the module, not this __main__ copy: hand_over reads its _serving

    warm.main()
