import os
import sys

import pytest
import torch

# The helpers of every layer (tests/support: references, scenes, the wheel under test) import by name, and so do
# this file's own (from conftest import make_ctx).
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "support"))

import prerast  # noqa: E402  (the installed wheel, or an in-place build on PYTHONPATH)

# CUDA tests need a GPU and prerast's CUDA kernels loaded (a CUDA wheel in a CPU-only torch has only CPU ops).
HAS_CUDA = torch.cuda.is_available() and prerast._loader.require() and prerast._loader.status()["cuda"] is None
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def make_ctx(device):
    return prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext(device)


@pytest.fixture
def ctx(device):
    return make_ctx(device)


def per_thread_count(fn, counts=(1, 2, 3)):
    """[fn() with torch on n CPU threads for n in counts]; the thread count is restored afterwards."""
    before = torch.get_num_threads()
    try:
        results = []
        for n in counts:
            torch.set_num_threads(n)
            results.append(fn())
        return results
    finally:
        torch.set_num_threads(before)


def assert_same_sums(a, b):
    """Gradients summed from the same terms: bit-equal on the CPU, whose order of additions is fixed; on CUDA,
    float atomics add them in whatever order the threads arrive, so only to rounding."""
    if a.is_cuda:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))
    else:
        assert torch.equal(a, b)


def pytest_configure(config):
    # Registered here rather than in pyproject.toml's list, where the other markers are.
    config.addinivalue_line(
        "markers",
        "platforms: builds the core with cross and emulated toolchains (mingw-w64 "
        "under wine, aarch64 under qemu; 20-40 s each); skipped unless -m selects it",
    )
    config.addinivalue_line(
        "markers",
        "free_threaded: builds CPython 3.13 with --disable-gil once (minutes; cached) and renders from threads "
        "with the GIL off; skipped unless -m selects it",
    )


requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU and a CUDA build of prerast")
