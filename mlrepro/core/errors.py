"""The base of the errors mlrepro raises on purpose."""


class MlreproError(Exception):
    """A bad config, input, file or state, said in a message that names it and what to do; ``except MlreproError``
    catches every such error of the project (each class keeps its built-in base too: ``ValueError`` for a bad
    value, ``RuntimeError`` for a failed step, ``OSError`` for an entry not read). Anything else is a bug."""
