"""Exceptions raised by prerast."""


class BinaryMismatchError(ImportError):
    """The compiled plugin bundled with prerast does not fit the running Python, torch, CUDA or GPU.

    The message states what the binary was built for, what is running, and the command that installs a fitting
    wheel. When loading itself failed, the original OSError is kept as __cause__. Also raised, before anything is
    loaded, for a library that is not the file its build stamped (truncated, altered, for another machine), for
    a missing or garbled _build_info.json, and for a build-cache entry that another user could have written.
    """


class ArtifactError(ValueError):
    """A file given to prerast.load_precompiled is not an intact artifact of prerast.precompile for this machine:
    missing, empty, truncated, damaged, or compiled for another machine. The message names the file."""
