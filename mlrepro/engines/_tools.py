"""The one-line error of an engine whose command-line tool is missing on this host."""

from __future__ import annotations

import shutil

from mlrepro.engines import EngineUnavailable


def require_tool(tool: str, install: str) -> str:
    """The tool's path; EngineUnavailable naming the tool and how to install it when it is not on PATH."""
    path = shutil.which(tool)
    if path is None:
        raise EngineUnavailable(f"{tool} is not installed (not on PATH); install it: {install}")
    return path
