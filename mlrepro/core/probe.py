"""The software and hardware a run sees, recorded for provenance."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def pip_freeze() -> list[str]:
    out = subprocess.run([sys.executable, "-P", "-m", "pip", "freeze", "--all"], capture_output=True, text=True,
                         check=False)
    return sorted(line for line in out.stdout.splitlines() if line and not line.startswith("#"))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def python_environment() -> dict[str, Any]:
    """Versions of what the runs import, in the current interpreter."""
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "packages": {d: _version(d) for d in ("torch", "mlperf-logging", "numpy", "snakemake", "nvidia-ml-py",
                                              "pycocotools", "mlrepro")},
        "pip_freeze": pip_freeze(),
    }


def gpus() -> dict[str, Any]:
    """GPUs NVML sees; a missing NVML is recorded with its reason, never raised."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound on machines without a GPU driver
        return {"nvml": False, "reason": f"{type(exc).__name__}: {exc}", "devices": []}
    try:
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            devices.append({"index": i, "name": pynvml.nvmlDeviceGetName(h), "uuid": pynvml.nvmlDeviceGetUUID(h),
                            "memory_total_bytes": int(mem.total)})
        return {"nvml": True, "driver": pynvml.nvmlSystemGetDriverVersion(), "devices": devices}
    finally:
        pynvml.nvmlShutdown()


def host() -> dict[str, Any]:
    import psutil

    return {
        "hostname": platform.node(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "physical_cpus": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": gpus(),
    }


def sockets() -> int:
    """CPU sockets of this host: the distinct physical package ids of its CPUs (1 where /sys does not say)."""
    ids = set()
    for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/physical_package_id"):
        try:
            ids.add(path.read_text().strip())
        except OSError:
            continue
    return len(ids) or 1
