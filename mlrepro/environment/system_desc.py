"""The system description JSON of a submission, captured from the host it ran on."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from mlrepro.core import probe


def _cache_sizes() -> str:
    sizes = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        sizes.append(f"L{level} {kind.lower()} {size}")
    return ", ".join(sizes) or "unknown"


def _cpu_mhz() -> str:
    try:
        mhz = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.startswith("cpu MHz")]
        return f"{max(mhz):.0f} MHz" if mhz else "unknown"
    except OSError:
        return "unknown"


def _storage() -> tuple[str, str]:
    import psutil

    usage = psutil.disk_usage("/")
    return "local disk", f"{usage.total / 1e9:.0f} GB"


def describe(submitter: str, division: str, status: str, system_name: str, threads: int,
             device: str, software: dict[str, Any] | None = None, mini: bool = True,
             frameworks: dict[str, str] | None = None) -> dict[str, Any]:
    """Every field ``mlperf_logging.system_desc_checker`` requires, filled from this host.

    ``software``: what the runs' engine saw (``Engine.describe``: inside the image for container runs);
    None: this interpreter. ``mini``: the runs are ours (the note says so); a vendor's runs get no such note.
    ``frameworks``: each vendor benchmark's framework, from its image (the framework field names each).
    """
    host = probe.host()
    gpus = host["gpus"]["devices"] if device != "cpu" else []
    storage_type, storage_capacity = _storage()
    software = software or probe.python_environment()
    torch_version = software["packages"].get("torch")
    return {
        "submitter": submitter,
        "division": division,
        "status": status,
        "system_name": system_name,
        "number_of_nodes": "1",
        "host_processors_per_node": str(probe.sockets()),
        "host_processor_model_name": host["cpu_model"],
        "host_processor_core_count": str(host["physical_cpus"] or host["logical_cpus"]),
        "host_processor_vcpu_count": str(host["logical_cpus"]),
        "host_processor_frequency": _cpu_mhz(),
        "host_processor_caches": _cache_sizes(),
        "host_processor_interconnect": "N/A",
        "host_memory_capacity": f"{host['memory_bytes'] / 2**30:.0f} GB",
        "host_storage_type": storage_type,
        "host_storage_capacity": storage_capacity,
        "host_networking": "N/A (single node)",
        "host_networking_topology": "N/A",
        "host_memory_configuration": "unknown",
        "accelerators_per_node": str(len(gpus)),
        "accelerator_model_name": gpus[0]["name"] if gpus else "N/A (CPU only)",
        "accelerator_host_interconnect": "PCIe" if gpus else "N/A",
        "accelerator_frequency": "N/A",
        "accelerator_on-chip_memories": "N/A",
        "accelerator_memory_configuration": "HBM" if gpus else "N/A",
        "accelerator_memory_capacity": f"{gpus[0]['memory_total_bytes'] / 2**30:.0f} GB" if gpus else "N/A",
        "accelerator_interconnect": "N/A",
        "accelerator_interconnect_topology": "N/A",
        "cooling": "air",
        "hw_notes": f"{threads} CPU thread(s) per run" if not gpus else "",
        "framework": "; ".join(f"{b}: {f}" for b, f in sorted(frameworks.items())) if frameworks
        else f"PyTorch {torch_version}",
        "other_software_stack": f"Python {software.get('python') or platform.python_version()}",
        "operating_system": platform.platform(),
        "sw_notes": "mini workloads of mlrepro on generated data (open division)" if mini else "",
    }
