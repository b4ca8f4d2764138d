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
        "bench_rasterize", os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmarks", "bench_rasterize.py")
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    pos, tri = bench.scene(1_000_000, 1, "cpu")
    ctx_c, ctx_g = prerast.RasterizeCpuContext(), prerast.RasterizeCudaContext()
    rc, _ = prerast.rasterize(ctx_c, pos, tri, (4096, 4096))
    rg, _ = prerast.rasterize(ctx_g, pos.cuda(), tri.cuda(), (4096, 4096))
    assert torch.equal(rc, rg.cpu())


def test_mip_lod_and_its_gradient_agree():
    # Skewed, circular, tiny, huge and NaN footprints, 2D and cube: the LOD math of texture.h on both sides.
    rng = np.random.default_rng(21)
    da = rng.normal(size=(1, 8, 16, 4)) * 2.0 ** rng.uniform(-8, 2, size=(1, 8, 16, 1))
    da[0, 0, :4] = [[0.1, 0.1, 0, 0], [0.1, 0, 0, 0.1], [1e-21, 0, 0, 0], [1e30, 0, 0, 1e30]]
    da[0, 0, 4, 0] = np.nan
    uv = rng.uniform(-1, 2, size=(1, 8, 16, 2))
    bias = rng.uniform(-1, 1, size=(1, 8, 16))
    tex = rng.normal(size=(1, 64, 32, 3))
    d = rng.normal(size=(1, 8, 16, 3))
    dd = rng.normal(size=(1, 8, 16, 6)) * 0.05
    cube = rng.normal(size=(1, 6, 16, 16, 3))

    def run(device):
        T = lambda a: torch.tensor(a, dtype=torch.float32, device=device, requires_grad=True)
        ins = [T(a) for a in (tex, uv, da, bias, cube, d, dd)]
        out = prerast.texture(*ins[:4]).sum() + prerast.texture(ins[4], ins[5], ins[6], boundary_mode="cube").sum()
        out.backward()
        return [out.detach().cpu()] + [t.grad.cpu() for t in ins]

    for a, b in zip(*both(run)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_triangle_ids_past_2_24_identical():
    big = 2**24 + 10
    pos = torch.tensor([[-0.9, -0.9, 0.3, 1.0], [0.9, -0.8, 0.1, 1.0], [-0.7, 0.9, 0.5, 1.0]])
    tri = torch.zeros(big + 1, 3, dtype=torch.int32)
    tri[big] = torch.tensor([0, 1, 2])
    ranges = torch.tensor([[big, 1]], dtype=torch.int32)

    def run(device):
        ctx = prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext()
        rast, _ = prerast.rasterize(ctx, pos.to(device), tri.to(device), (32, 32), ranges=ranges)
        out, _ = prerast.interpolate(
            torch.rand(3, 2, generator=torch.Generator().manual_seed(0)).to(device), rast, tri.to(device)
        )
        return rast.cpu(), out.cpu()

    (rc, oc), (rg, og) = both(run)
    assert torch.equal(rc, rg) and torch.equal(oc, og) and (rc[..., 3] > 2**24).any()
