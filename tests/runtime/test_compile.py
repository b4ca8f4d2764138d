"""torch.compile(fullgraph=True) straight through a whole render function: no graph break, and outputs and
gradients equal to eager ones, with static and dynamic shapes (resolution and vertex count)."""

import pytest
import torch

import prerast
from conftest import make_ctx
from render_scene import grid_scene, render


def run(fn, ctx, n, res, seed=0):
    """fn's image and loss for a grid of n x n quads at res, and the gradients of the loss."""
    pos, tri, uv, tex = grid_scene(n=n, seed=seed, device=ctx.device)
    pos.requires_grad_(True), uv.requires_grad_(True), tex.requires_grad_(True)
    target = torch.rand(1, *res, 3, generator=torch.Generator().manual_seed(seed)).to(ctx.device)
    color, loss = fn(ctx, pos, tri, uv, tex, target)
    loss.backward()
    return color.detach(), loss.detach(), pos.grad, uv.grad, tex.grad


def assert_same(compiled, eager):
    for c, e in zip(compiled, eager):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-6)
    assert compiled[2].abs().sum() > 0 and compiled[4].abs().sum() > 0  # gradients reach pos and the texture


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_fullgraph_equals_eager(device):
    ctx = make_ctx(device)
    compiled = torch.compile(render, fullgraph=True)  # fullgraph: a graph break would raise
    assert_same(run(compiled, ctx, 4, (20, 24)), run(render, ctx, 4, (20, 24)))


def test_dynamic_resolution_and_vertex_count(device):
    ctx = make_ctx(device)
    compiled = torch.compile(render, fullgraph=True, dynamic=True)
    for i, (n, res) in enumerate(((4, (17, 21)), (5, (24, 19)), (6, (31, 27)))):  # no two sizes equal (duck sizing)
        # The first graph serves every later resolution and vertex count: a recompilation would raise.
        with torch._dynamo.config.patch(error_on_recompile=i > 0):
            assert_same(run(compiled, ctx, n, res, seed=n), run(render, ctx, n, res, seed=n))


def test_prebuilt_mip_chain_and_topology_hash_pass_through(device):
    # The helper objects hold tensors only: Dynamo reads them like any Python object, with no graph break.
    ctx = make_ctx(device)

    def shade(pos, tri, uv, tex, mip, topology):
        rast, rast_db = prerast.rasterize(ctx, pos, tri, (19, 23))
        texc, texd = prerast.interpolate(uv, rast, tri, rast_db=rast_db, diff_attrs="all")
        color = prerast.texture(tex, texc, texd, mip=mip, filter_mode="linear-mipmap-linear")
        return prerast.antialias(color, rast, pos, tri, topology_hash=topology)

    def run_shade(fn):
        pos, tri, uv, tex = grid_scene(n=4, seed=7, device=device)
        pos.requires_grad_(True), tex.requires_grad_(True)
        out = fn(
            pos,
            tri,
            uv,
            tex,
            prerast.texture_construct_mip(tex, max_mip_level=2),
            prerast.antialias_construct_topology_hash(tri),
        )
        out.square().sum().backward()
        return out.detach(), pos.grad, tex.grad

    compiled = torch.compile(shade, fullgraph=True)
    for c, e in zip(run_shade(compiled), run_shade(shade)):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-6)
