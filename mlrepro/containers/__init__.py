"""Container images of the benchmarks: build through the Docker Engine API, lock, bundle.

The DAG side is rules/containers.smk; a run asks :func:`image_ref` which image to start.
"""

from mlrepro.containers.errors import BaseImageMissing, BuildFailed, ContainerError, ImageMismatch
from mlrepro.containers.lock import image_ref

__all__ = ["BaseImageMissing", "BuildFailed", "ContainerError", "ImageMismatch", "image_ref"]
