"""Errors of the container layer, each one line a user can act on."""

from __future__ import annotations

from mlrepro.core.errors import MlreproError
from mlrepro.engines import EngineUnavailable


class ContainerError(MlreproError, RuntimeError):
    """Base of the errors below."""


class BuildFailed(ContainerError):
    """A Dockerfile step failed; the message carries that step's output."""


class BaseImageMissing(ContainerError):
    """The Dockerfile's FROM image is not in the local store and could not be pulled."""


class ImageMismatch(ContainerError):
    """A locked digest does not match the image available here."""


__all__ = ["BaseImageMissing", "BuildFailed", "ContainerError", "EngineUnavailable", "ImageMismatch"]
