"""The CPU output cache of the plugin (csrc/bindings/output_cache.h): large CPU outputs (1 MiB and more) reuse the
memory of released ones of the same size, whose pages are already faulted in. empty_cache() frees what it holds;
the private functions below serve the tests. Reached through ctypes: the functions are C exports of the CPU
binding, which the loader has loaded."""

import ctypes
import functools

from . import _loader

# Bytes of released CPU outputs kept for reuse, in MiB (0 turns the cache off); read at the first large output.
VARIABLE = "PRERAST_CPU_OUTPUT_CACHE_MB"
STATS = ("held_bytes", "held_blocks", "limit", "reused", "allocated", "live_blocks")


@functools.cache
def _binding(path):
    lib = ctypes.CDLL(path)  # the binding torch loaded already: the same library, not a second copy
    lib.prerast_output_cache_empty.restype = ctypes.c_int64
    lib.prerast_output_cache_stats.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    lib.prerast_output_cache_stats.restype = None
    lib.prerast_output_cache_configure.argtypes = [ctypes.c_int64, ctypes.c_int]
    lib.prerast_output_cache_configure.restype = None
    return lib


def _lib():
    return _binding(_loader.require()["path"])


def empty_cache():
    """Free the memory that prerast keeps for reuse by its CPU outputs.

    A large CPU output (1 MiB and more) of rasterize, interpolate, texture, antialias or their gradients is made
    in memory that an earlier output of the same size released, when there is one: writing into pages the
    process already has is several times faster than having the system fault in and zero fresh ones, which a
    loop at one resolution would otherwise pay on every call. Released memory is kept up to a bound (an eighth of
    the machine's memory, at most 4 GiB; ``PRERAST_CPU_OUTPUT_CACHE_MB`` sets it in MiB, 0 turns the cache off),
    the oldest released dropped first. This frees all of it now, as ``torch.cuda.empty_cache()`` does for
    torch's GPU memory; outputs still referenced (by a tensor, a view or autograd) keep theirs. CUDA outputs come
    from torch's own allocator and are not affected.

    Returns:
        int: the bytes freed.
    """
    return int(_lib().prerast_output_cache_empty())


def _stats():
    """{name: value} of STATS: bytes and blocks held, the bound (bytes), blocks reused, newly allocated and
    in use."""
    out = (ctypes.c_int64 * len(STATS))()
    _lib().prerast_output_cache_stats(out)
    return dict(zip(STATS, out))


def _configure(limit=None, poison=False):
    """For tests: the bound in bytes (None: the environment's or the default) and whether every block handed out
    is first filled with NaN (what a kernel leaves unwritten shows)."""
    _lib().prerast_output_cache_configure(-1 if limit is None else int(limit), int(bool(poison)))
