"""CPU and CUDA run the same core arithmetic: their results must agree (bit for bit where no atomics are used)."""
import numpy as np
import pytest
import torch

import prerast
from conftest import requires_cuda
from scenes import random_scene, to_torch

pytestmark = requires_cuda


def both(fn):
    return fn("cpu"), fn("cuda")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("res", [(1, 1), (37, 53), (256, 256)])
def test_rasterize_forward_identical(seed, res):
    rng = np.random.default_rng(seed)
    pos, tri = random_scene(rng, num_images=3, num_tris=500, perspective=True)

    def run(device):
        ctx = prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext()
        return [t.cpu() for t in prerast.rasterize(ctx, *to_torch(pos, tri, device), res)]

    (rc, dc), (rg, dg) = both(run)
    assert torch.equal(rc, rg)
    assert torch.equal(dc, dg)


def test_range_mode_and_peeling_identical():
    rng = np.random.default_rng(9)
    pos, tri = random_scene(rng, num_images=1, num_tris=300, perspective=True, spread=2.0)
    ranges = torch.tensor([[0, 100], [50, 250], [0, 300]], dtype=torch.int32)

    def run(device):
        ctx = prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext()
        p, t = to_torch(pos[0], tri, device)
        with prerast.DepthPeeler(ctx, p, t, (64, 48), ranges=ranges) as peeler:
            return [peeler.rasterize_next_layer()[0].cpu() for _ in range(3)]

    for a, b in zip(*both(run)):
        assert torch.equal(a, b)


def test_gradients_agree():
    rng = np.random.default_rng(2)
    pos, tri = random_scene(rng, num_images=2, num_tris=200, perspective=True)
    w = torch.randn(2, 64, 64, 4)

    def run(device):
        ctx = prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext()
        p, t = to_torch(pos, tri, device)
        p.requires_grad_(True)
        rast, db = prerast.rasterize(ctx, p, t, (64, 64))
        ((rast[..., :2] * w[..., :2].to(device)).sum() + (db * w.to(device)).sum()).backward()
        return p.grad.cpu()

    gc, gg = both(run)
    torch.testing.assert_close(gg, gc, rtol=1e-4, atol=1e-4 * gc.abs().max().item())


def test_large_scene_and_resolution():
    # Millions of tiny triangles and a 4096^2 target: compares the binning at scale.
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location(
        "bench_rasterize", os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "bench_rasterize.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    pos, tri = bench.scene(1_000_000, 1, "cpu")
    ctx_c, ctx_g = prerast.RasterizeCpuContext(), prerast.RasterizeCudaContext()
    rc, _ = prerast.rasterize(ctx_c, pos, tri, (4096, 4096))
    rg, _ = prerast.rasterize(ctx_g, pos.cuda(), tri.cuda(), (4096, 4096))
    assert torch.equal(rc, rg.cpu())
