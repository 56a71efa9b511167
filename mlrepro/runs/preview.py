"""``snakemake launch_preview``: what each (system, benchmark)'s runs will execute on the cluster, before any GPU hour.

One entry per (system, benchmark): the implementation, its config file, the number of runs, the allocation each
run asks for, ``node_hours`` (runs x nodes x WALLTIME: the upper bound) and ``steps``, the commands one run executes
in their order, each an argument list. A folder with run.sub: its own steps, found by running it in a private sandbox
as the first node of its allocation (mlrepro/slurm/trace.py) with exactly the variables a run gives it
(mlrepro/runs/runsub.py); every command it ran (``commands``, those the preview could not answer marked as what
would run on the first node), its mounts with what fills each (``mounts``) and what it needs set that the
configuration leaves unset or empty (``demands``, mlrepro/runs/demands.py: then ``error``). The allocation's job id,
node names and run.sub's date stamp are placeholders (999999, node1..nodeN, DATESTAMP); a status other than 0 after
the training step is the stand-ins' (a step's output that run.sub reads is empty). Other implementations: the run
script the driver starts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.job import Job
from mlrepro.runs import demands, runsub
from mlrepro.runs.launch_spec import LaunchSpec
from mlrepro.slurm import trace

DATESTAMP = "DATESTAMP"
RUN_SETS = ("CONT", "DATADIR", "LOGDIR")  # what the pipeline gives every run (the config's image and data_dir)


def cont_for(launch: LaunchSpec, image_record: Path | None) -> str:
    """CONT as the run will have it: the ready image, the built image's record, else what it will be built from."""
    if launch.container:
        return launch.container
    if image_record is not None and image_record.is_file():
        record = json.loads(image_record.read_text(encoding="utf-8"))
        return str(record.get("file") or record["tag"])
    return runsub.unbuilt_image(launch.folder)


def entry(system: str, launch: LaunchSpec, runs: int, seed: int, image_record: Path | None,
          log_dir: str, node: dict[str, Any] | None = None, fills: dict[str, str] | None = None) -> dict[str, Any]:
    """The preview of one (system, benchmark); ``node``: WhatRuns.trace_node's (the node the stand-ins describe);
    ``fills``: the container-side destinations the benchmark's data recipe fills (mlrepro.datasets.vendor_fills)."""
    found: dict[str, Any] = {"system": system, "benchmark": launch.benchmark, "implementation": launch.folder,
                             "config_file": launch.config_file, "runs": runs}
    if launch.run_sub:
        alloc = dict(launch.allocation)
        env = {**runsub.environment(launch, seed, log_dir, cont_for(launch, image_record)),
               "DATESTAMP": DATESTAMP}
        described = trace.Node.of(int(alloc["nodes"]), int(alloc["gpus_per_node"]),
                                  str(launch.runsub_env.get("DGXSYSTEM", system)), **(node or {}))
        finding = demands.find(Path(launch.run_sub), env, described)
        traced = finding.trace
        found.update({"launcher": "run.sub", "run_sub": launch.run_sub, "allocation": alloc,
                      "node": described.to_dict(), "steps": traced.steps, "summary": trace.summarize(traced),
                      "mounts": demands.mount_table(traced, Path(launch.folder), launch.benchmark, fills or {}),
                      "commands": [{"argv": c.argv, "at": c.at, "kind": c.kind,
                                    **({"note": trace.FIRST_NODE} if c.kind == "unknown" else {})}
                                   for c in traced.commands]})
        found["traced_exit_code"] = traced.exit_code
        by_hand = sorted({m["variable"] for m in found["mounts"] if m["variable"] and m["variable"] not in RUN_SETS
                          and m["destination"].rstrip("/") not in (fills or {})})
        found["data"] = {"recipe": f"minis/{launch.benchmark}/dataset.yaml" if fills else None,
                         "fills": fills or {}, "by_hand": by_hand}
        if not fills:
            found["data"]["note"] = (f"no data recipe for {launch.benchmark}: prepare what "
                                     f"{', '.join(by_hand) or 'its mounts'} name by hand, as the folder's README says")
        if unknown := [c for c in traced.commands if c.kind == "unknown"]:
            found["first_node"] = [f"{c.at}: {' '.join(c.argv)}" for c in unknown]  # what the preview could not answer
        if finding.demands:
            found["demands"] = [d.to_dict() for d in finding.demands]
            found["unset_variables"] = sorted({d.variable for d in finding.demands if d.variable})
            found["error"] = (f"{launch.run_sub} needs variables set that neither {launch.config_file} nor the config "
                              "sets:\n" + "\n".join(demands.problems(finding.demands, benchmark=launch.benchmark,
                                                                       system=system, config_name=launch.config_file,
                                                                       fills=fills or {})))
        elif blocked := [c for c in traced.commands if c.kind == "blocked"]:
            found["error"] = (f"{blocked[0].at} runs `{blocked[0].argv[0][:200]}`: a cluster tool by its path, which "
                              "the preview never runs (the host's own); call it by its name, as the stand-ins answer "
                              "it, or read what the run would do there yourself")
        elif traced.timed_out:
            found["error"] = (f"{launch.run_sub} did not end within the preview's time (a command waited on what it "
                              f"never got); it was stopped. Its last lines:\n{traced.stderr_tail}")
        elif "training" not in found["summary"]:  # it stopped before its training step: a run would stop there too
            found["error"] = (f"{launch.run_sub} exited with status {traced.exit_code} before its training step "
                              f"(the srun of run_and_time.sh) when traced. Its last lines:\n{traced.stderr_tail}")
    else:
        alloc = {"nodes": launch.nodes, "gpus_per_node": launch.gpus // max(1, launch.nodes), "time_minutes": None}
        script = launch.script_in_container or f"{launch.folder}/run_and_time.sh"
        found.update({"launcher": "mlrepro", "allocation": alloc, "steps": [["bash", script]]})
    return found


def with_node_hours(item: dict[str, Any], time_minutes: float | None) -> dict[str, Any]:
    alloc = item["allocation"]
    alloc["time_minutes"] = alloc.get("time_minutes") or time_minutes
    item["node_hours"] = round(item["runs"] * alloc["nodes"] * (alloc["time_minutes"] or 0) / 60, 3)
    return item


def table(entries: Iterable[dict[str, Any]]) -> str:
    """Node-hours per system (and each benchmark's), the upper bound before submitting."""
    entries = list(entries)
    lines = [f"{'system':<28} {'benchmark':<18} {'runs':>4} {'nodes':>5} {'minutes':>8} {'node-hours':>10}"]
    totals: dict[str, float] = {}
    for e in entries:
        a = e["allocation"]
        failing = "  (run.sub fails: see its error)" if "error" in e else ""
        lines.append(f"{e['system']:<28} {e['benchmark']:<18} {e['runs']:>4} {a['nodes']:>5} "
                     f"{a['time_minutes'] or 0:>8.0f} {e['node_hours']:>10.2f}{failing}")
        totals[e["system"]] = totals.get(e["system"], 0.0) + e["node_hours"]
    lines += [f"{s:<28} {'(all)':<18} {'':>4} {'':>5} {'':>8} {h:>10.2f}" for s, h in totals.items()]
    lines.append(f"{'total':<28} {'':<18} {'':>4} {'':>5} {'':>8} {sum(totals.values()):>10.2f}")
    return "\n".join(lines)


def write(out: Path, entries: list[dict[str, Any]]) -> None:
    atomic.write_text(out, json.dumps(entries, indent=1) + "\n")


def job(job: Job) -> None:
    """The launch_preview rule's job (rules/preview.smk): params units
    (mlrepro.planning.launches.Launches.preview_units); the entries to its output, the node-hours table to its log
    (shown on the terminal)."""
    entries = []
    for u in job.params["units"]:
        launch = LaunchSpec.from_dict(u["launch"], f"the launch spec of {u['system']}/{u['launch'].get('benchmark')}")
        record = Path(u["image_record"]) if u["image_record"] else None
        entries.append(with_node_hours(entry(u["system"], launch, u["runs"], u["seed"], record, u["log_dir"],
                                             u.get("node"), u.get("fills")), u["minutes"]))
    write(job.output.first, entries)
    print(table(entries))
