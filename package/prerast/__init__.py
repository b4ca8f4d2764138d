"""prerast: differentiable mesh rasterization for PyTorch, from prebuilt binaries.

The API follows nvdiffrast's: rasterize, DepthPeeler, interpolate, texture, antialias, with CUDA and CPU
contexts. Importing prerast loads the bundled plugin and fails with BinaryMismatchError if it does not fit the
running torch/CUDA; `python -m prerast doctor` explains what is installed and what fits.
"""

import os
import sys

from prerast_meta.version import __version__

from . import _loader
from .errors import BinaryMismatchError


def _cli_is_starting():
    """True while `python -m prerast ...` or the `prerast` script imports this package: the command line
    reports a load failure itself, so the import must not fail."""
    argv = getattr(sys, "orig_argv", [])
    as_module = (
        sys.argv[:1] == ["-m"] and "prerast" in argv[argv.index("-m") + 1 : argv.index("-m") + 2]
        if "-m" in argv
        else False
    )
    as_script = os.path.basename(sys.argv[0]) == "prerast" if sys.argv else False
    return as_module or as_script


# The command line loads what fits but builds nothing at import: `demo` builds if opted in; `doctor` loads nothing
# itself until a child process has tried the load for it (a library that crashes on load must not end it). The
# doctor's child loads like the command line does.
_cli = _cli_is_starting() or bool(os.environ.get(_loader.PROBE_ENV))
if not (_cli and sys.argv[1:2] == ["doctor"]):
    try:
        _loader.load_or_remember(build=not _cli)
    except BinaryMismatchError:
        if not _cli:
            raise

from ._antialias import TopologyHash, antialias, antialias_construct_topology_hash  # noqa: E402
from ._context import RasterizeCpuContext, RasterizeCudaContext, RasterizeGLContext  # noqa: E402
from ._interpolate import interpolate  # noqa: E402
from ._log import get_log_level, set_log_level  # noqa: E402
from ._output_cache import empty_cache  # noqa: E402
from ._precompile import load_precompiled, precompile  # noqa: E402
from ._rasterize import DepthPeeler, rasterize  # noqa: E402
from ._texture import TextureMipChain, texture, texture_construct_mip  # noqa: E402

__all__ = [
    "BinaryMismatchError",
    "DepthPeeler",
    "RasterizeCpuContext",
    "RasterizeCudaContext",
    "RasterizeGLContext",
    "TextureMipChain",
    "TopologyHash",
    "__version__",
    "antialias",
    "antialias_construct_topology_hash",
    "empty_cache",
    "get_log_level",
    "interpolate",
    "load_precompiled",
    "precompile",
    "rasterize",
    "set_log_level",
    "texture",
    "texture_construct_mip",
]
