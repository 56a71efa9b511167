"""What the engines share: the one-line error of an engine whose command-line tool is missing on this host,
and the environment that shows a run its GPUs."""

from __future__ import annotations

import shutil

from mlrepro.engines import EngineUnavailable


def require_tool(tool: str, install: str) -> str:
    """The tool's path; EngineUnavailable naming the tool and how to install it when it is not on PATH."""
    path = shutil.which(tool)
    if path is None:
        raise EngineUnavailable(f"{tool} is not installed (not on PATH); install it: {install}")
    return path


def visible_env(indices: list[int]) -> dict[str, str]:
    # "void" keeps NVIDIA's container runtimes from exposing any GPU to a CPU-only run
    value = ",".join(map(str, indices))
    return {"CUDA_VISIBLE_DEVICES": value, "NVIDIA_VISIBLE_DEVICES": value or "void"}
