"""The one error of reproduce mode."""

from mlrepro.core.errors import MlreproError


class ReproduceError(MlreproError, ValueError):
    """What is missing or wrong to reproduce a package, in one paragraph naming the file, before any run."""
