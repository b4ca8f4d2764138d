"""Exceptions raised by prerast."""


class BinaryMismatchError(ImportError):
    """The compiled plugin bundled with prerast does not fit the running Python, torch, CUDA or GPU.

    The message states what the binary was built for, what is running, and the command that installs a fitting
    wheel. When loading itself failed, the original OSError is kept as __cause__.
    """
