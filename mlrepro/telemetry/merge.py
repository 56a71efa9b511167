"""One run's telemetry over all its nodes: the batch host's summary, each other node's, merged into one.

The merged summary keeps the batch host's keys as they are on one node and adds ``hosts`` (per host: its
sampler's status, GPUs, accelerator energy and peak memory), every node's GPUs tagged with their ``host``, the
other nodes' reasons named by their node, and ``accelerator_energy_j`` as the total over the hosts (None when a
host's is unknown: a total that left out a node would pass for the whole run's).
"""

from __future__ import annotations

from typing import Any


def _peak(values: list[Any]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def host_entry(host: str, role: str, summary: dict[str, Any] | None, started: str = "running") -> dict[str, Any]:
    """One host's line: ``summary`` is its own summary (None: its sampler wrote nothing), ``started`` how its
    sampler started ("running" or "failed: <why>")."""
    summary = summary or {}
    gpus = summary.get("gpus") or []
    stats = summary.get("host") or {}
    reasons = summary.get("reasons") or ([] if summary else ["no telemetry: its sampler wrote nothing"])
    why = started.removeprefix("failed: ")
    if started != "running" and why not in reasons:  # a sampler that failed at start says so in its own files too
        reasons = [f"sampler did not start: {why}", *reasons]
    return {
        "host": host, "role": role,
        "sampler": (summary.get("sampler") or {}).get("status") or "never started",
        "partial": bool(reasons) or bool(summary.get("partial", True)),
        "reasons": list(dict.fromkeys(reasons)),
        "gpus": len(gpus),
        "accelerator_energy_j": summary.get("accelerator_energy_j"),
        "peak_gpu_mem_used_mb": _peak([g.get("peak_mem_used_mb") for g in gpus]),
        "peak_host_mem_used_mb": stats.get("peak_mem_used_mb"),
        "mean_cpu_pct": stats.get("mean_cpu_pct"),
    }


def merge(summary: dict[str, Any], host: str, nodes: dict[str, Any] | None,
          node_summaries: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """``summary`` of the batch host ``host`` merged with the other nodes': ``nodes`` is the record of the nodes
    expected and how each one's sampler started (mlrepro/telemetry/nodes.py; None on one node),
    ``node_summaries`` each one's own summary (None where it wrote nothing)."""
    nodes = nodes or {}
    out = dict(summary)
    out["gpus"] = [{**g, "host": host} for g in summary.get("gpus") or []]
    hosts = [host_entry(host, "batch host", summary)]
    reasons = list(summary.get("reasons") or [])
    if nodes.get("error"):
        reasons.append(str(nodes["error"]))
    for name in nodes.get("hosts", []):
        own = node_summaries.get(name)
        entry = host_entry(name, "node", own, (nodes.get("status") or {}).get(name, "failed: not started"))
        hosts.append(entry)
        out["gpus"] += [{**g, "host": name} for g in (own or {}).get("gpus") or []]
        reasons += [f"node {name}: {r}" for r in entry["reasons"]]
    out["hosts"] = hosts
    energies = [h["accelerator_energy_j"] for h in hosts]
    out["accelerator_energy_j"] = round(sum(energies), 3) if None not in energies else None
    out["reasons"] = list(dict.fromkeys(reasons))
    out["partial"] = bool(out["reasons"]) or any(h["partial"] for h in hosts)
    return out
