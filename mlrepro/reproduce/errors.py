"""The one error of reproduce mode."""


class ReproduceError(ValueError):
    """What is missing or wrong to reproduce a package, in one paragraph naming the file, before any run."""
