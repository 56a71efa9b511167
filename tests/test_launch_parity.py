"""Done when (issue 42): every NVIDIA v1.1 and v4.1 implementation folder and config file in ../shared/data,
configured only as docs/vendor-launch.md says, previews equal to its run.sub trace with no refusal.

Configured as the docs say: nothing but the config's image and data_dir at first; then each variable the capture job
names (it runs run.sub as a run would: mlrepro/runs/demands.py) is set in ``benchmarks.<bm>.env``, and nothing else
(besides the docs' notes of :data:`NOTES`), until the capture refuses nothing: so no variable is set that its run
never reads. Every config file of a folder: those that give a job shape (DGXNNODES) are systems; the others are
fragments, each sourced by one of them (checked from the capture records).

The preview (mlrepro/runs/preview.py) comes from the pipeline's real planning (config -> systems -> Plan, each config
file captured as its capture job does it -> launch spec), one system per config file. The reference is the folder's
run.sub launched as its README says
(``source config_<SYSTEM>.sh; CONT=... DATADIR=... LOGDIR=... NEXP=1 sbatch -N $DGXNNODES run.sub``), run by this
test in the folder with its own recording stand-ins for srun, sbatch, enroot, sudo, scontrol and sleep (not the
pipeline's), in an allocation of DGXNNODES nodes, with the variables set as above. Every step must be equal, argument
for argument; and the training step must start DGXNGPU tasks per node (DLRM 1, MiniGo RANKS_PER_NODE) with its mounts,
MPI type and workdir, after the cache clearing and its cache_clear line where the run.sub has them. Three folders run in
the fast tier, all of them in the integration tier.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from mlrepro import config as mlconfig
from mlrepro import systems as mlsystems
from mlrepro.planning.plan import Plan
from mlrepro.runs import capture
from mlrepro.slurm import trace
from tests.conftest import captured, launch_preview

pytestmark = pytest.mark.vendor

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
ROUNDS = {"1.1.0": "mlperf_training_nvidia_implementations_v1.1.tar.xz",
          "4.1.0": "mlperf_training_nvidia_implementations_v4.1.tar.xz"}
IMAGE = "nvcr.io/nvidia/mlperf-test:24.09-py3"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "vendor-launch.md"
# docs/vendor-launch.md's notes: what a folder needs that its preview names as an error, not a variable (its run.sub
# sources a hang monitor its published folder lacks)
NOTES = {"gpt3/implementations/b200_n8_preview_nemo": {"HANG_MONITOR_TIMEOUT": "0"},
         "gpt3/implementations/eos-dfw_n1452_ngc24.04_nemo": {"HANG_MONITOR_TIMEOUT": "0"}}
# the fast tier's sample: mounts.txt through envsubst (v1.1), RUNSUB_DIR through scontrol and checkpoints (gpt3),
# the base model's checkpoint (LoRA)
FAST = {("1.1.0", "bert/implementations/pytorch"), ("4.1.0", "gpt3/implementations/eos_n32_ngc24.09_nemo"),
        ("4.1.0", "llama2_70b_lora/implementations/eos_n8_ngc24.09_nemo")}
# The test's own stand-in: each argument ("=" before it) base64-encoded on its own line, a blank line after each
# command, written at once.
STANDIN = r"""#!/bin/bash
record="$(printf '=%s' "${0##*/}" | base64 -w0)"$'\n'
for a in "$@"; do record+="$(printf '=%s' "$a" | base64 -w0)"$'\n'; done
printf '%s\n' "$record" >> "$PARITY_RECORD"  # one write: the commands of a pipeline record at the same time
if [ "${0##*/}" = scontrol ] && [ "$1" = show ] && [ "$2" = hostnames ]; then
  for i in $(seq 1 "$PARITY_NODES"); do echo "node$i"; done
elif [ "${0##*/}" = scontrol ] && [ "$1" = show ] && [ "$2" = job ]; then
  echo "JobId=$3"; echo "   Command=$PARITY_RUN_SUB"
fi
exit 0
"""


@pytest.fixture(scope="module")
def rounds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    found = {}
    for ruleset, name in ROUNDS.items():
        archive = SHARED / name
        if not archive.is_file():
            pytest.skip(f"{archive} is not here (../shared/data)")
        dest = tmp_path_factory.mktemp(f"nvidia-{ruleset}")
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
        found[ruleset] = dest / "NVIDIA" / "benchmarks"
    return found


def folders(ruleset: str) -> list[str]:
    """Every implementation folder with run.sub of the round, as benchmark/implementations/<impl> (read from the
    archive's member names, so that the parametrization needs no unpacking)."""
    archive = SHARED / ROUNDS[ruleset]
    if not archive.is_file():
        return []
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    return sorted({n.split("NVIDIA/benchmarks/", 1)[1].rsplit("/", 1)[0] for n in names
                   if n.endswith("/run.sub") and "NVIDIA/benchmarks/" in n})


def system_configs(folder: Path) -> list[Path]:
    """The folder's config files that give a job shape; each other one (a fragment) is sourced by one of them."""
    systems, fragments, sourced = [], [], set()
    for config in sorted(folder.glob("config_*.sh")):
        try:
            record = capture.source_native(config)
        except capture.CaptureError:  # a fragment stopping on what its including file sets (DGXNNODES)
            fragments.append(config)
            continue
        if "DGXNNODES" in record.env:
            systems.append(config)
            sourced |= {Path(p).name for p in record.sourced}
        else:
            fragments.append(config)
    assert systems, f"{folder}: no config file gives a job shape"
    assert not [f.name for f in fragments if f.name not in sourced], f"{folder}: a config file neither shapes a job " \
        "nor is sourced by one that does"
    return systems


def readme_trace(folder: Path, config: Path, env: dict[str, str], nodes: int, tmp: Path) -> list[list[str]]:
    """run.sub as the README launches it: the config file sourced, the variables set, an allocation of ``nodes``."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("srun", "sbatch", "enroot", "sudo", "scontrol", "sleep"):
        (bin_dir / name).write_text(STANDIN)
        (bin_dir / name).chmod(0o755)
    record = tmp / f"record-{config.stem}"
    record.write_text("")
    node_list = "node1" if nodes == 1 else f"node[1-{nodes}]"
    full = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp), "LANG": "C.UTF-8",
            "SLURM_JOB_ID": trace.JOB_ID, "SLURM_JOBID": trace.JOB_ID, "SLURM_JOB_NUM_NODES": str(nodes),
            "SLURM_NNODES": str(nodes), "SLURM_JOB_NODELIST": node_list, "SLURM_NODELIST": node_list,
            "PARITY_RECORD": str(record), "PARITY_NODES": str(nodes), "PARITY_RUN_SUB": str(folder / "run.sub")}
    # the README's variables are set on sbatch's command line, after the config file is sourced: they win
    given = [f"{k}={v}" for k, v in env.items()]
    script = 'set -a; source "$1" >/dev/null 2>&1; set +a; shift; exec env "$@" bash ./run.sub'
    proc = subprocess.run(["bash", "-c", script, "bash", str(config), *given], cwd=folder, env=full,
                          capture_output=True, timeout=120, check=False)
    last = (proc.stderr.decode(errors="replace") + proc.stdout.decode(errors="replace")).splitlines()[-5:]
    commands, current = [], []
    for line in record.read_text().splitlines():
        if line:
            current.append(base64.b64decode(line).decode()[1:])  # each word starts with "=": "" is not a blank line
        elif current:
            commands.append(current)
            current = []
    steps = [c for c in commands if c[0] in ("srun", "sbatch", "enroot", "sudo")]
    assert steps, f"{config}: run.sub ran no step (exit {proc.returncode}):\n" + "\n".join(last)
    return steps


def plan_for(ruleset: str, folder: Path, benchmark: str, configs: list[Path], data: Path, out: Path,
             env: dict[str, str]) -> Plan:
    """The pipeline's plan of one folder: a system per config file (named after it), its own runs."""
    systems = {c.stem.removeprefix("config_"): {"config_files": {benchmark: c.name}} for c in configs}
    raw = {"outdir": str(out), "ruleset": ruleset, "engine": "enroot", "allow_fewer_runs": True,
           "systems": systems,
           "benchmarks": {benchmark: {"implementation": str(folder), "image": IMAGE, "data_dir": str(data),
                                      "runs": 1, "env": env}}}
    full, benchmarks = mlconfig.load(raw, source="parity test", base_dir=folder)
    units_systems, units = mlsystems.load(full, benchmarks, folder, "parity test")
    return captured(Plan(full, benchmarks, {}, units_systems, units, Path(__file__).resolve().parents[1]))


def configured(ruleset: str, impl: str, folder: Path, benchmark: str, configs: list[Path], data: Path,
               out: Path) -> tuple[Plan, dict[str, str]]:
    """The plan as a submitter following docs/vendor-launch.md gets it: the docs' notes, then each variable the
    capture names set, until it names none. The variables set: each was demanded by a run of run.sub."""
    env = dict(NOTES.get(impl, {}))
    for _ in range(len(configs) + 3):
        try:
            return plan_for(ruleset, folder, benchmark, configs, data, out, env), env
        except capture.CaptureError as e:
            named = re.findall(rf"^  benchmarks\.{benchmark}\.env\.([A-Za-z_][A-Za-z0-9_]*): ", str(e), re.MULTILINE)
            assert named and not set(named) & set(env), str(e)  # a variable set is never asked for again
            # each named with the file and line that reads it
            assert all(re.search(rf"env\.{n}: /\S+:\d+ (reads|mounts|stops on) \$\{{{n}\}}", str(e)) for n in named)
            env.update({name: f"/lustre/{benchmark}/{name.lower()}" for name in named})
    raise AssertionError(f"{folder}: the capture kept naming variables: {env}")


def expected_tasks_per_node(benchmark: str, env: dict[str, str]) -> str:
    if benchmark in ("dlrm", "dlrm_dcnv2"):
        return "1"
    if benchmark == "minigo":  # run.sub: RANKS_PER_NODE=$((DGXNGPU * PROCS_PER_GPU + 1))
        return str(int(env["DGXNGPU"]) * int(env["PROCS_PER_GPU"]) + 1)
    return env["DGXNGPU"]


CASES = [pytest.param(r, f, marks=() if (r, f) in FAST else pytest.mark.integration,
                       id=f"v{r[:3]}-{f.replace('/implementations/', '-')}") for r in ROUNDS for f in folders(r)]


@pytest.mark.parametrize(("ruleset", "impl"), CASES)
def test_preview_steps_are_run_sub_steps(rounds: dict[str, Path], ruleset: str, impl: str, tmp_path: Path) -> None:
    folder = rounds[ruleset] / impl
    benchmark = impl.split("/")[0]
    configs = system_configs(folder)
    data = tmp_path / "data"
    data.mkdir()
    plan, given = configured(ruleset, impl, folder, benchmark, configs, data, tmp_path / "results")
    launch_preview(plan, tmp_path / "launch_preview.json")

    entries = {e["system"]: e for e in json.loads((tmp_path / "launch_preview.json").read_text())}
    assert sorted(entries) == sorted(c.stem.removeprefix("config_") for c in configs)
    for config in configs:
        system = config.stem.removeprefix("config_")
        entry = entries[system]
        assert "error" not in entry and "demands" not in entry, entry.get("error")
        shape = plan.captured(system, benchmark).env
        nodes = int(shape.get("DGXNNODES", 1))
        assert entry["allocation"]["nodes"] == nodes
        assert entry["node_hours"] == pytest.approx(nodes * entry["allocation"]["time_minutes"] / 60, abs=1e-3)
        # CONT: the system's .sqsh of the registry image, imported once (mlrepro/containers/sqsh.py)
        env = {"CONT": str(plan.launches.spec(system, benchmark).container), "DATADIR": str(data),
               "LOGDIR": str(plan.out.run_dir(system, benchmark, 0).resolve()),
               "NEXP": "1", "SEED": str(plan.run_seed(benchmark, 0)), "DATESTAMP": "DATESTAMP", **given}
        if "DGXSYSTEM" not in shape:  # the README names the system; its config files export it themselves
            env["DGXSYSTEM"] = system
        reference = readme_trace(folder, config, env, nodes, tmp_path)
        assert entry["steps"] == reference, f"{config.name}: the preview's steps differ from what run.sub executes"
        assert_training_step(entry, reference, benchmark, shape, nodes)
        assert all(m["source"] for m in entry["mounts"]), entry["mounts"]  # no mount of an empty source
    docs = DOCS.read_text()
    for note in NOTES.get(impl, {}):
        assert f"{impl.split('/')[-1]}" in docs and note in docs, f"docs/vendor-launch.md: no note of {impl}'s {note}"
    row = docs_row(docs, benchmark, ruleset)
    assert not [v for v in given if v not in NOTES.get(impl, {}) and f"`{v}`" not in row], \
        f"docs/vendor-launch.md's row of {benchmark} v{ruleset[:3]} does not name every variable its folders demand"


def docs_row(docs: str, benchmark: str, ruleset: str) -> str:
    """The mounts table's row of ``benchmark`` in round ``ruleset`` (docs/vendor-launch.md)."""
    for line in docs.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 3 and cells[0].split(" ")[0] == benchmark and cells[1] == f"v{ruleset[:3]}":
            return line
    raise AssertionError(f"docs/vendor-launch.md: no row of {benchmark} v{ruleset[:3]} in its mounts table")


def assert_training_step(entry: dict[str, Any], reference: list[list[str]], benchmark: str, env: dict[str, str],
                         nodes: int) -> None:
    index = next(i for i, s in enumerate(reference)
                 if s[0] == "srun" and any("run_and_time" in w for w in trace.split(s)[1]))
    opts, _ = trace.split(reference[index])
    per_node = expected_tasks_per_node(benchmark, env)
    assert opts["--ntasks-per-node"] == per_node
    assert int(str(opts["--ntasks"])) == nodes * int(per_node)
    training = entry["summary"]["training"]
    assert (training["ntasks_per_node"], training["ntasks"]) == (opts["--ntasks-per-node"], opts["--ntasks"])
    assert training["mpi"] == opts.get("--mpi")
    assert training["workdir"] == opts.get("--container-workdir")
    mounts = [m.split(":")[1] for m in str(opts.get("--container-mounts", "")).split(",") if ":" in m]
    assert training["mounts"] == mounts
    clears = [i for i, s in enumerate(reference) if any("drop_caches" in w for w in s)]
    assert entry["summary"]["cache_clear"] == bool(clears)
    assert all(i < index for i in clears)
    logged = [i for i, s in enumerate(reference) if any("CACHE_CLEAR" in w for w in s)]
    assert entry["summary"]["cache_clear_logged"] == bool(logged)
