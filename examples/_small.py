"""The ``--small`` switch of the examples: a tiny Avey-B with random weights and a toy tokenizer, built here in a
moment with no download, so that every example runs anywhere (the test suite runs them so). Its outputs mean
nothing; the code path is the real one."""

import tempfile

from avey_b import testing


def tiny_model(directory: str | None = None) -> str:
    """A directory holding a tiny masked-LM Avey-B and its tokenizer."""
    directory = directory or tempfile.mkdtemp(prefix="avey-b-example-")
    testing.avey_b(directory, testing.tokenizer(directory))
    return directory
