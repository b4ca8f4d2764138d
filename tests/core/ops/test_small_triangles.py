"""Triangles a few pixels across at 4096^2, away from the screen centre (a dense mesh at high resolution): their
edge values are near 1e-6 there, so any row of the edge functions rounded in float from products near 1 would cost
percents of their barycentrics, depth and gradients (rasterize.h takes them about the triangle's first vertex, in
double). Checked against float64 models of the same float32 vertices: barycentrics and z/w per pixel, the depth
order of two such meshes 1 % apart, and the position gradient."""

import numpy as np
import pytest
import torch

import prerast

SIZE = 4096


def grid(n, lo, hi, zw, seed):
    """An n x n grid of quads (two triangles each) over [lo, hi]^2 in NDC at depth zw, each vertex given its own
    w in [0.5, 2] (the same point on screen, but perspective-correct barycentrics that depend on w)."""
    xs = np.linspace(lo, hi, n + 1)
    x, y = (a.ravel() for a in np.meshgrid(xs, xs, indexing="xy"))
    w = np.random.default_rng(seed).uniform(0.5, 2.0, x.size)
    pos = np.stack([x * w, y * w, zw * w, w], -1).astype(np.float32)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel()
    tri = np.concatenate([np.stack([a, b, d], 1), np.stack([a, d, c], 1)]).astype(np.int32)
    return pos, tri


def drawn_pixels(rast, count, seed):
    """(y, x, triangle index) of up to count random drawn pixels."""
    ids = rast[..., 3].long()
    y, x = torch.nonzero(ids > 0, as_tuple=True)
    pick = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:count]
    y, x = y[pick], x[pick]
    return y, x, ids[y, x] - 1


def pixel_centres64(y, x, size=SIZE):
    """NDC (px, py) in float64 of the centres of pixels (y, x) of a size x size image."""
    return (2 * x.double() + 1) / size - 1, (2 * y.double() + 1) / size - 1


def barycentrics64(pos, tri, px, py):
    """(lam [P, 3]) with M lam = (px, py, 1) in float64, M's columns the vertices' (x, y, w), for NDC points
    (px, py) drawn by triangles tri [P, 3]; pos, px and py are float64 tensors (autograd flows through them)."""
    M = pos[tri][..., [0, 1, 3]].transpose(1, 2)  # [P, 3 (x, y, w), 3 vertices]
    q = torch.stack([px, py, torch.ones_like(px)], -1)[..., None]
    return torch.linalg.solve(M, q)[..., 0]


@pytest.fixture(scope="module")
def mesh():
    return grid(500, 0.2, 0.95, 0.5, seed=1)  # cells of 1.5e-3 NDC: 3 pixels


def test_barycentrics_and_depth_of_small_triangles(ctx, device, mesh):
    pos, tri = mesh
    rast, _ = prerast.rasterize(
        ctx, torch.from_numpy(pos)[None].to(device), torch.from_numpy(tri).to(device), (SIZE, SIZE)
    )
    rast = rast[0].cpu()
    y, x, t = drawn_pixels(rast, 200_000, seed=2)
    lam = barycentrics64(torch.from_numpy(pos).double(), torch.from_numpy(tri).long()[t], *pixel_centres64(y, x))
    S = lam.sum(-1)
    u, v = lam[:, 0] / S, lam[:, 1] / S
    zw = (lam * torch.from_numpy(pos).double()[torch.from_numpy(tri).long()[t]][..., 2]).sum(-1)
    err_uv = torch.maximum((rast[y, x, 0].double() - u).abs(), (rast[y, x, 1].double() - v).abs())
    err_z = (rast[y, x, 2].double() - zw).abs()
    # Measured: 4.8e-7 at most (median 3e-8), depth 1.8e-7; edge functions about the NDC origin in float gave
    # 0.17 and 0.08, rows rounded from double but still about the origin 3e-4 and 1e-4.
    assert err_uv.max() < 2e-6 and err_uv.median() < 2e-7, (err_uv.max(), err_uv.median())
    assert err_z.max() < 1e-6, err_z.max()


def test_depth_order_of_small_triangles_one_percent_apart(ctx, device, mesh):
    front_pos, front_tri = mesh
    back_pos, back_tri = grid(400, 0.25, 0.9, 0.505, seed=3)  # inside the front mesh's square, 1 % behind
    pos = torch.from_numpy(np.concatenate([front_pos, back_pos]))[None].to(device)
    tri = torch.from_numpy(np.concatenate([front_tri, back_tri + len(front_pos)])).to(device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (SIZE, SIZE))
    ids = rast[0, ..., 3].cpu().long()
    back = ids > len(front_tri)
    assert (ids > 0).sum() > 2_000_000
    assert back.sum() == 0, f"{int(back.sum())} pixels show the mesh behind"


def test_position_gradient_of_small_triangles(ctx, device):
    pos, tri = grid(60, 0.7, 0.79, 0.5, seed=4)  # 60 x 60 quads of 3 pixels, NDC 0.7 to 0.79
    p = torch.from_numpy(pos)[None].to(device).requires_grad_(True)
    rast, _ = prerast.rasterize(ctx, p, torch.from_numpy(tri).to(device), (SIZE, SIZE))
    g = torch.zeros_like(rast)
    g[..., :2] = torch.rand(rast.shape[:-1] + (2,), generator=torch.Generator().manual_seed(5)).to(device)
    (grad,) = torch.autograd.grad(rast, p, g)
    # The same loss in float64 through a linear solve per drawn pixel.
    r, gc = rast[0].detach().cpu(), g[0].cpu()
    ids = r[..., 3].long()
    y, x = torch.nonzero(ids > 0, as_tuple=True)
    t = ids[y, x] - 1
    p64 = torch.from_numpy(pos).double().requires_grad_(True)
    lam = barycentrics64(p64, torch.from_numpy(tri).long()[t], *pixel_centres64(y, x))
    S = lam.sum(-1)
    loss = (gc[y, x, 0].double() * lam[:, 0] / S + gc[y, x, 1].double() * lam[:, 1] / S).sum()
    (want,) = torch.autograd.grad(loss, p64)
    got = grad[0].cpu().double()
    # Relative to the largest component: 1e-7 measured with the forward's rows about vertex 0 (5e-5 with M inverted
    # in double about the NDC origin, 5e-2 with it inverted in float).
    assert (got - want).abs().max() < 1e-5 * want.abs().max(), ((got - want).abs().max(), want.abs().max())


@pytest.mark.parametrize("ratio_exp", [16, 40])
def test_position_gradient_with_vertex_weights_far_apart(ctx, device, ratio_exp):
    # Vertices 1 and 2 scaled by 2^k (the same points on screen, perspective weights 2^-k against vertex 0's): u is 1
    # to within 2^-k, and its complements must not be formed as 1 - u. Gradients of u, v and rast_db against a
    # float64 solve.
    s = 2.0**ratio_exp
    pos = np.array(
        [[-0.3, -0.4, 0.1, 1.0], [0.5 * s, -0.2 * s, 0.3 * s, 1.2 * s], [0.1 * s, 0.6 * s, 0.2 * s, 0.9 * s]],
        np.float32,
    )
    tri = np.array([[0, 1, 2]], np.int32)
    res = 48
    p = torch.from_numpy(pos)[None].to(device).requires_grad_(True)
    rast, db = prerast.rasterize(ctx, p, torch.from_numpy(tri).to(device), (res, res))
    gen = torch.Generator().manual_seed(6)
    g_rast = torch.zeros(rast.shape)
    g_rast[..., :2] = torch.randn(rast.shape[:-1] + (2,), generator=gen)
    g_db = torch.randn(db.shape, generator=gen)
    (grad,) = torch.autograd.grad([rast, db], p, [g_rast.to(device), g_db.to(device)])
    ids = rast[0, ..., 3].detach().cpu().long()
    y, x = torch.nonzero(ids > 0, as_tuple=True)
    assert len(y) > 150
    p64 = torch.from_numpy(pos).double().requires_grad_(True)
    px, py = (c.requires_grad_(True) for c in pixel_centres64(y, x, res))
    lam = barycentrics64(p64, torch.from_numpy(tri).long()[torch.zeros(len(y), dtype=torch.long)], px, py)
    u, v = lam[:, 0] / lam.sum(-1), lam[:, 1] / lam.sum(-1)
    # rast_db in pixel units: d/dX = (2 / W) d/dpx, through the graph (create_graph keeps it differentiable).
    du_dx, du_dy = torch.autograd.grad(u.sum(), (px, py), create_graph=True)
    dv_dx, dv_dy = torch.autograd.grad(v.sum(), (px, py), create_graph=True)
    gdb = g_db[0, y, x].double()
    loss = (g_rast[0, y, x, 0].double() * u + g_rast[0, y, x, 1].double() * v).sum() + (
        2 / res * (gdb[:, 0] * du_dx + gdb[:, 1] * du_dy + gdb[:, 2] * dv_dx + gdb[:, 3] * dv_dy)
    ).sum()
    (want,) = torch.autograd.grad(loss, p64)
    got = grad[0].cpu().double()
    # Per vertex, relative to that vertex's largest component (their scales differ by 2^k).
    for k in range(3):
        err = (got[k] - want[k]).abs().max() / want[k].abs().max()
        assert err < 1e-3, (k, float(err))
