"""The pipeline's own processes on a compute node (each job's Snakemake, the dispatcher, the run driver, telemetry)
run from a Python environment built for that node's architecture.

The checkout's ``.venv`` is built on the login node (x86_64); an arm64 GPU node (GB200, GB300) cannot run it. With
``slurm.node_venvs: <folder on the shared file system>`` each architecture has its own venv there
(``<folder>/x86_64``, ``<folder>/aarch64``), built by a job on a node of that architecture
(``python -m mlrepro.slurm.node_env build``: ``python3 -m venv`` and ``pip install`` of this checkout), and
``<folder>/activate`` picks the node's own by ``uname -m`` when a job starts. Snakemake runs a job's command as
``<precommand> && python -m snakemake ...`` where its ``--shared-fs-usage`` leaves out ``software-deployment``
(otherwise it names the login node's interpreter): profiles/slurm-multiarch sets both, ``--precommand
'. <folder>/activate'``. A system's architecture is its ``systems.<name>.platform`` (linux/arm64: aarch64); the
launch preview names the venv each system's processes run from (:func:`describe`).
"""

from __future__ import annotations

import argparse
import platform as host_platform
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.errors import MlreproError

MACHINES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64", "linux/arm64/v8": "aarch64", "linux/ppc64le": "ppc64le"}
ACTIVATE = "activate"
# sourced by /bin/sh in each job's command (Snakemake's --precommand): the node's own venv, or a clear stop
CHOOSER = """# mlrepro (mlrepro/slurm/node_env.py): the venv of this node's architecture, for the pipeline's processes
_mlrepro_venv={root}/"$(uname -m)"
if [ ! -x "$_mlrepro_venv/bin/python" ]; then
  echo "mlrepro: no venv for $(uname -m) at $_mlrepro_venv; build it with a job on a $(uname -m) node:" \\
       "python -m mlrepro.slurm.node_env build --root {root} --machine $(uname -m)" >&2
  return 1 2>/dev/null || exit 1
fi
. "$_mlrepro_venv/bin/activate"
echo "mlrepro: $(hostname) ($(uname -m)) runs $_mlrepro_venv/bin/python" >&2
"""


class NodeEnvError(MlreproError, ValueError):
    pass


def machine(platform: str | None, login: str | None = None) -> str:
    """``uname -m`` of a system's nodes: that of its platform, else the login node's (the pipeline's own)."""
    if platform is None:
        return login or host_platform.machine()
    if platform not in MACHINES:
        raise NodeEnvError(f"systems.<name>.platform: {platform!r} is none of {', '.join(sorted(MACHINES))}")
    return MACHINES[platform]


@dataclass(frozen=True)
class NodeEnv:
    """Where a system's jobs get their Python: the machine, the venv and whether it is built."""
    machine: str
    venv: str  # the folder; the checkout's .venv without slurm.node_venvs
    python: str
    built: bool
    chosen_by: str  # what picks it on the node


def for_system(platform: str | None, node_venvs: str | None, checkout_venv: Path, login: str | None = None
               ) -> NodeEnv:
    """The environment a system's jobs run from; NodeEnvError where its nodes cannot run the checkout's venv and
    ``slurm.node_venvs`` names no venv of theirs."""
    login = login or host_platform.machine()
    nodes = machine(platform, login)
    if node_venvs is None:
        if nodes != login:
            raise NodeEnvError(f"systems.<name>.platform {platform}: its {nodes} nodes cannot run this checkout's "
                               f"venv ({checkout_venv}, built for {login}); set slurm.node_venvs to a folder on the "
                               "shared file system and build a venv there per architecture (docs/cluster.md, "
                               "nodes of another architecture)")
        return NodeEnv(nodes, str(checkout_venv), str(checkout_venv / "bin" / "python"),
                       (checkout_venv / "bin" / "python").is_file(), "the job's interpreter (the login node's)")
    venv = Path(node_venvs) / nodes
    return NodeEnv(nodes, str(venv), str(venv / "bin" / "python"), (venv / "bin" / "python").is_file(),
                   f"{Path(node_venvs) / ACTIVATE} (Snakemake's --precommand) by uname -m")


def describe(env: NodeEnv) -> dict[str, Any]:
    return asdict(env)


def chooser(root: Path) -> str:
    """``<root>/activate``'s text: the node's own venv by ``uname -m``."""
    return CHOOSER.format(root=shlex.quote(str(root)))


def build_argv(root: Path, nodes: str, repo: Path, sbatch: list[str]) -> list[str]:
    """The job that builds ``<root>/<nodes>`` on a node of that architecture: ``sbatch --wait`` (with the
    partition and constraint that select such nodes) of ``python3 -m venv`` and ``pip install`` of this checkout
    and Slurm's executor plugins."""
    venv = root / nodes
    script = (f"set -e; test \"$(uname -m)\" = {shlex.quote(nodes)} || {{ echo \"not a {nodes} node: $(uname -m)\" >&2;"
              f" exit 1; }}; python3 -m venv {shlex.quote(str(venv))}; {shlex.quote(str(venv / 'bin' / 'pip'))} "
              f"install -q -r {shlex.quote(str(repo / 'requirements.txt'))} -r "
              f"{shlex.quote(str(repo / 'requirements-slurm.txt'))} -e {shlex.quote(str(repo))}")
    return ["sbatch", "--wait", "--parsable", f"--job-name=mlrepro-venv-{nodes}", "--nodes=1", "--time=60",
            *sbatch, f"--output={root / f'build-{nodes}.log'}", f"--wrap={script}"]


def main(argv: list[str] | None = None) -> None:
    """``python -m mlrepro.slurm.node_env build --root DIR --machine aarch64 [-- SBATCH_OPTIONS]``: write
    ``DIR/activate`` and build DIR/<machine> by a job on such a node."""
    p = argparse.ArgumentParser(prog="python -m mlrepro.slurm.node_env", description=__doc__)
    p.add_argument("command", choices=["build"])
    p.add_argument("--root", type=Path, required=True, help="slurm.node_venvs: a folder on the shared file system")
    p.add_argument("--machine", required=True, help="uname -m of the nodes (x86_64, aarch64)")
    p.add_argument("sbatch", nargs="*", help="sbatch options that select such nodes (--partition=..., --constraint=)")
    args = p.parse_args(argv)
    root = args.root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    atomic.write_text(root / ACTIVATE, chooser(root))
    repo = Path(__file__).resolve().parents[2]
    sys.exit(subprocess.run(build_argv(root, args.machine, repo, args.sbatch), check=False).returncode)


if __name__ == "__main__":
    main()
