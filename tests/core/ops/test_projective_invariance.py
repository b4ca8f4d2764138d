"""Clip-space positions are homogeneous: s * (x, y, z, w) is the same point for every s > 0, and a cube-map
lookup's direction has no length. Scaling them must not change what is drawn or sampled, from s = 1e-30 to
1e30: bit for bit for powers of two, to float32 rounding otherwise, with gradients finite and scaled by 1/s.
Vertices anywhere in float32 range draw their on-screen part, without NaN or inf.

Every check is against the same scene at s = 1 (or a float64 model of it)."""

import numpy as np
import pytest
import torch

import exact_raster
import prerast
import reference
from conftest import assert_same_sums

POW2 = [2.0**-100, 2.0**-37, 0.5, 2.0**21, 2.0**90]
OTHER = [1e-30, 3e-20, 1e-10, 7e-3, 1.0, 5e9, 1e13, 1e18, 1e30]
H, W = 24, 32


def scene():
    """[1, V, 4] positions and [T, 3] indices: a jittered perspective grid (shared edges, some folds) and a few
    loose triangles, some crossing w = 0 and the depth planes."""
    rng = np.random.default_rng(7)
    n = 4
    u = np.linspace(-0.9, 0.9, n + 1)
    gx, gy = np.meshgrid(u, u)
    xy = np.stack([gx, gy], -1).reshape(-1, 2) + rng.uniform(-0.15, 0.15, ((n + 1) ** 2, 2))
    w = rng.uniform(0.6, 2.5, len(xy))
    z = rng.uniform(-0.6, 0.6, len(xy))
    grid = np.concatenate([xy * w[:, None], (z * w)[:, None], w[:, None]], -1)
    tri = [[i * (n + 1) + j, i * (n + 1) + j + 1, (i + 1) * (n + 1) + j + 1] for i in range(n) for j in range(n)]
    tri += [[i * (n + 1) + j, (i + 1) * (n + 1) + j + 1, (i + 1) * (n + 1) + j] for i in range(n) for j in range(n)]
    loose = rng.uniform(-2.0, 2.0, (12, 4))
    loose[:, 3] = rng.uniform(-0.5, 2.0, 12)
    tri += (len(grid) + np.arange(12).reshape(4, 3)).tolist()
    pos = np.concatenate([grid, loose])[None]
    return torch.tensor(pos, dtype=torch.float32), torch.tensor(tri, dtype=torch.int32)


def unambiguous(pos, tri):
    """The float64 model's pixels whose result float rounding cannot change (away from edges and depth ties)."""
    _, ambiguous, _ = reference.rasterize(pos.double().numpy(), tri.numpy(), H, W)
    return torch.from_numpy(~ambiguous)


def weights(shape, seed, device):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(device)


def rasterize_with_grad_at(ctx, pos, tri, res):
    """rast, rast_db and the gradient to pos of a random linear function of both (u, v and the derivatives)."""
    p = pos.to(ctx.device).clone().requires_grad_(True)
    rast, db = prerast.rasterize(ctx, p, tri.to(ctx.device), res)
    shape = (1,) + tuple(res)
    loss = (rast[..., :2] * weights(shape + (2,), 1, ctx.device)).sum() + (
        db * weights(shape + (4,), 2, ctx.device)
    ).sum()
    loss.backward()
    return rast.detach().cpu(), db.detach().cpu(), p.grad.cpu()


def rasterize_with_grad(ctx, pos, tri):
    return rasterize_with_grad_at(ctx, pos, tri, (H, W))


def antialias_with_grad(ctx, pos, tri):
    """The antialiased image of a colour constant per triangle (so that pos acts through the silhouettes alone)
    and the gradient to pos of a random linear function of it."""
    p = pos.to(ctx.device).clone().requires_grad_(True)
    t = tri.to(ctx.device)
    rast, _ = prerast.rasterize(ctx, p, t, (H, W))
    palette = torch.rand(len(tri) + 1, 3, generator=torch.Generator().manual_seed(3)).to(ctx.device)
    out = prerast.antialias(palette[rast[..., 3].long()], rast, p, t)
    (out * weights(out.shape, 4, ctx.device)).sum().backward()
    return out.detach().cpu(), p.grad.cpu()


def same_bits(a, b):
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def assert_scaled_gradient(g, s, g1, rtol=1e-3):
    """g * s against g1, to rtol (relative to each entry, and to the largest one)."""
    assert torch.isfinite(g).all()
    torch.testing.assert_close(g.double() * s, g1.double(), rtol=rtol, atol=rtol * float(g1.abs().max()))


@pytest.fixture(scope="module")
def base():
    pos, tri = scene()
    keep = unambiguous(pos, tri)
    assert keep.all(), "the scene should have no pixel centre on an edge or a depth tie"
    return pos, tri


# --- rasterize ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s", POW2)
def test_power_of_two_scale_is_bit_identical(ctx, base, s):
    pos, tri = base
    r1, db1, g1 = rasterize_with_grad(ctx, pos, tri)
    r, db, g = rasterize_with_grad(ctx, pos * s, tri)
    assert (r1[..., 3] > 0).sum() > H * W // 2
    assert same_bits(r, r1)
    assert same_bits(db, db1)
    assert torch.isfinite(g).all() and (g1 != 0).any()
    # Exactly 1/s: every term is scaled by the same power of two (CUDA's atomics sum them in any order).
    assert_same_sums((g * s).to(ctx.device), g1.to(ctx.device))


@pytest.mark.parametrize("s", OTHER)
def test_any_scale_changes_only_rounding(ctx, base, s):
    pos, tri = base
    r1, db1, g1 = rasterize_with_grad(ctx, pos, tri)
    r, db, g = rasterize_with_grad(ctx, pos * s, tri)
    assert torch.equal(r[..., 3], r1[..., 3])  # no pixel centre lies on an edge (see base)
    torch.testing.assert_close(r[..., :3], r1[..., :3], rtol=0, atol=2e-4)
    assert torch.isfinite(db).all()
    torch.testing.assert_close(db, db1, rtol=1e-4, atol=1e-4 * float(db1.abs().max()))
    assert_scaled_gradient(g, s, g1)


def test_per_vertex_scales(ctx, base):
    # Each vertex its own scale: the same points, so the same coverage and depth; the barycentrics are those of
    # the scaled vertices (perspective-correct interpolation weighs vertex i by 1/s_i): beta_i ~ beta1_i / s_i.
    pos, tri = base
    rng = np.random.default_rng(1)
    for scales in (2.0 ** rng.integers(-100, 100, pos.shape[1]), 10.0 ** rng.uniform(-30, 30, pos.shape[1])):
        s = torch.tensor(scales)
        scaled = (pos.double() * s[None, :, None]).float()
        r1, db1, _ = rasterize_with_grad(ctx, pos, tri)
        r, db, g = rasterize_with_grad(ctx, scaled, tri)
        assert torch.equal(r[..., 3], r1[..., 3])
        if (scales == np.exp2(np.round(np.log2(scales)))).all():
            assert same_bits(r[..., 2], r1[..., 2])
        else:
            torch.testing.assert_close(r[..., 2], r1[..., 2], rtol=0, atol=1e-5)
        assert torch.isfinite(r).all() and torch.isfinite(db).all() and torch.isfinite(g).all()
        # Expected barycentrics and derivatives from the unscaled ones, in float64.
        ids = r1[0, ..., 3].long()
        covered = ids > 0
        b1 = torch.stack([r1[0, ..., 0], r1[0, ..., 1], 1 - r1[0, ..., 0] - r1[0, ..., 1]], -1).double()
        d1 = db1[0].double().reshape(H, W, 2, 2)  # [du/dX, du/dY], [dv/dX, dv/dY]
        d1 = torch.cat([d1, -(d1[..., :1, :] + d1[..., 1:, :])], -2)  # the third barycentric
        inv = (1 / s)[tri.long()[(ids - 1).clamp(min=0)]]  # [H, W, 3]: 1 / s of each pixel's vertices
        num = b1 * inv
        den = num.sum(-1, keepdim=True)
        beta = num / den
        dnum = d1 * inv[..., None]
        dbeta = dnum / den[..., None] - num[..., None] * dnum.sum(-2, keepdim=True) / den[..., None] ** 2
        got_uv = r[0, ..., :2].double()[covered]
        torch.testing.assert_close(got_uv, beta[..., :2][covered], rtol=0, atol=2e-4)
        want_db = dbeta[..., :2, :].reshape(H, W, 4)[covered]
        torch.testing.assert_close(db[0].double()[covered], want_db, rtol=1e-3, atol=1e-3 * float(want_db.abs().max()))


def test_matches_exact_model_under_extreme_scales(base):
    # The CPU rasterizer is bit for bit the arithmetic of rasterize.h, normalisation and the double-precision
    # barycentrics (vertex scales 1e60 apart) included.
    pos, tri = base
    rng = np.random.default_rng(2)
    for p in (
        pos * 1e30,
        pos * 3e-20,
        (pos.double() * torch.tensor(10.0 ** rng.uniform(-30, 30, pos.shape[1]))[None, :, None]).float(),
    ):
        rast, db = prerast.rasterize(prerast.RasterizeCpuContext(), p, tri, (H, W))
        ref, ref_db = exact_raster.rasterize(p.numpy(), tri.numpy(), H, W)
        assert np.array_equal(rast.numpy().view(np.uint32), ref.view(np.uint32))
        assert np.array_equal(db.numpy().view(np.uint32), ref_db.view(np.uint32))


# --- antialias ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s", POW2 + OTHER)
def test_antialias_is_scale_invariant(ctx, base, s):
    pos, tri = base
    out1, g1 = antialias_with_grad(ctx, pos, tri)
    out, g = antialias_with_grad(ctx, pos * s, tri)
    assert (g1 != 0).any()
    if s in POW2:
        assert same_bits(out, out1)
    else:
        torch.testing.assert_close(out, out1, rtol=0, atol=1e-4)
    if s in POW2:
        assert torch.isfinite(g).all()
        assert_same_sums((g * s).to(ctx.device), g1.to(ctx.device))
    else:
        assert_scaled_gradient(g, s, g1)


def test_antialias_per_vertex_scales(ctx, base):
    # Silhouettes depend on the points alone: each vertex's own power-of-two scale changes no bit of the image,
    # and the gradient to vertex i scales by 1/s_i.
    pos, tri = base
    s = torch.tensor(2.0 ** np.random.default_rng(3).integers(-100, 100, pos.shape[1]))
    out1, g1 = antialias_with_grad(ctx, pos, tri)
    out, g = antialias_with_grad(ctx, (pos.double() * s[None, :, None]).float(), tri)
    assert same_bits(out, out1)
    assert torch.isfinite(g).all()
    assert_same_sums((g.double() * s[None, :, None]).float().to(ctx.device), g1.to(ctx.device))


# --- vertices far away -------------------------------------------------------------------------------------

FAR = [-0.5, -0.8, 0.0, 1.0], [-0.5, 0.8, 0.0, 1.0]


@pytest.mark.parametrize("x", [1.85e19, 3e30, 3.4e38])
def test_far_vertex_draws_its_on_screen_part(ctx, x):
    # A triangle with one vertex at x = 1.85e19 (w = 1) and two on screen covers, on screen, the strip
    # x > -0.5, |y| < 0.8 (its long edges have slopes of 1e-19 or less).
    Hs, Ws = 16, 16
    pos = torch.tensor([[[x, 0.0, 0.0, 1.0], *FAR]])
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    p = pos.to(ctx.device).clone().requires_grad_(True)
    rast, db = prerast.rasterize(ctx, p, tri.to(ctx.device), (Hs, Ws))
    px, py = reference.pixel_centers(Hs, Ws)
    want = (px > -0.5) & (np.abs(py) < 0.8)
    got = rast[0, ..., 3].detach().cpu().numpy() > 0
    assert want.sum() > 100 and np.array_equal(got, want)
    if isinstance(ctx, prerast.RasterizeCpuContext):
        ref, ref_db = exact_raster.rasterize(pos.numpy(), tri.numpy(), Hs, Ws)
        assert np.array_equal(rast.detach().numpy().view(np.uint32), ref.view(np.uint32))
        assert np.array_equal(db.detach().numpy().view(np.uint32), ref_db.view(np.uint32))
    # Affine barycentrics (w = 1 everywhere): the far vertex weighs (X + 0.5) / (x + 0.5).
    u = rast[0, ..., 0].detach().cpu().numpy()
    np.testing.assert_allclose(u[want], ((px + 0.5) / (x + 0.5))[want], rtol=1e-3, atol=1e-30)
    v = rast[0, ..., 1].detach().cpu().numpy()
    np.testing.assert_allclose(v[want], (1 - (py + 0.8) / 1.6)[want], rtol=0, atol=1e-5)
    assert torch.isfinite(db).all()
    color = torch.stack([rast[..., 0], rast[..., 1], (rast[..., 3] > 0).float()], -1)
    out = prerast.antialias(color, rast, p, tri.to(ctx.device))
    loss = rast[..., :2].sum() + db.sum() + out.sum()
    loss.backward()
    assert torch.isfinite(out).all() and torch.isfinite(p.grad).all() and (p.grad != 0).any()


EXTREME = {
    "x and y at float max": [[3.4e38, 3.4e38, 0.0, 1.0], *FAR],
    "two far vertices": [[3e38, 0.1, 0.0, 1.0], [3e38, -3e38, 0.0, 1.0], FAR[1]],
    "all at float max": [[3.4e38, 0.0, 0.0, 3.4e38], [-3e38, -3e38, 0.0, 3.4e38], [-3e38, 3e38, 0.0, 3.4e38]],
    "depth far beyond the far plane": [[0.5, 0.5, 1e38, 1.0], *FAR],
    "depth and w huge": [[0.5, 0.5, -1e30, 1e30], *FAR],
    "w tiny": [[0.5, 0.1, 0.0, 1e-38], *FAR],
    "w tiny and negative": [[0.5, 0.1, 0.0, -1e-38], *FAR],
    "behind the eye, far": [[3e38, 0.0, 0.0, -1.0], *FAR],
    "zero vertex": [[0.0, 0.0, 0.0, 0.0], *FAR],
    "all zero": [[0.0, 0.0, 0.0, 0.0]] * 3,
    "scales 1e68 apart": [[0.5e38, 0.1e38, 0.0, 1e38], [-0.5e-30, -0.8e-30, 0.0, 1e-30], FAR[1]],
}


@pytest.mark.parametrize("name", list(EXTREME))
def test_huge_finite_coordinates_give_finite_results(ctx, name):
    pos = torch.tensor([EXTREME[name]], dtype=torch.float32)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=ctx.device)
    p = pos.to(ctx.device).clone().requires_grad_(True)
    rast, db = prerast.rasterize(ctx, p, tri, (16, 16))
    color = torch.stack([rast[..., 0], rast[..., 1], (rast[..., 3] > 0).float()], -1)
    out = prerast.antialias(color, rast, p, tri)
    g = torch.Generator().manual_seed(0)
    loss = sum((t * torch.randn(t.shape, generator=g).to(ctx.device)).sum() for t in (rast[..., :2], db, out))
    loss.backward()
    for t in (rast, db, out, p.grad):
        assert torch.isfinite(t).all()
    assert ((rast[..., :2] >= 0) & (rast[..., :2] <= 1)).all()
    if isinstance(ctx, prerast.RasterizeCpuContext):
        ref, ref_db = exact_raster.rasterize(pos.numpy(), tri.cpu().numpy(), 16, 16)
        assert np.array_equal(rast.detach().numpy().view(np.uint32), ref.view(np.uint32))
        assert np.array_equal(db.detach().numpy().view(np.uint32), ref_db.view(np.uint32))


def test_barycentrics_of_vertices_with_far_apart_scales(ctx):
    # Vertex B scaled by 2^-100, A and C not: everywhere off the edge AC, B's barycentric is 1 to float precision;
    # on that edge (through pixel centres, drawn by the tie rule) B's is exactly 0, float weights of A and C
    # underflow against B's and the barycentrics come from the double-precision path: those of A and C alone.
    Hs, Ws = 16, 16
    c = (2 * 9 + 1) / Ws - 1  # the centre of column 9
    pos1 = torch.tensor([[[c, -0.9, 0.0, 1.0], [0.8, 0.0, 0.0, 1.0], [c, 0.9, 0.0, 1.0]]])
    pos = pos1.clone()
    pos[0, 1] *= 2.0**-100
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    r1, db1, _ = rasterize_with_grad_at(ctx, pos1, tri, (Hs, Ws))
    r, db, g = rasterize_with_grad_at(ctx, pos, tri, (Hs, Ws))
    assert torch.equal(r[..., 3], r1[..., 3]) and same_bits(r[..., 2], r1[..., 2])
    edge = r1[0, :, 9, 3] > 0
    assert edge.sum() > 8 and (r1[0, edge, 9, 1] == 0).all()  # the tie rule draws the edge; B's weight is 0 there
    torch.testing.assert_close(r[0, :, 9, :2], r1[0, :, 9, :2], rtol=0, atol=1e-6)
    inside = (r1[0, ..., 3] > 0) & (r1[0, ..., 1] > 1e-3)
    torch.testing.assert_close(r[0, ..., 1][inside], torch.ones(int(inside.sum())))
    for t in (r, db):
        assert torch.isfinite(t).all()
    # Gradients. On AC, B's barycentric is 0 while its weight is 2^100 times A's and C's: u and v change there by
    # about 2^100 per unit of A's or C's position (finite in float), rast_db (itself about 2^100 there) by about
    # 2^300 per unit of B's (past float's range). So the loss takes rast_db off AC only. And on AC, u and v are
    # the position between A and C alone: they pass B no gradient at all.
    p = pos.clone().to(ctx.device).requires_grad_(True)
    rast, rast_db = prerast.rasterize(ctx, p, tri.to(ctx.device), (Hs, Ws))
    on_edge = torch.zeros(1, Hs, Ws, 1, device=ctx.device)
    on_edge[:, :, 9] = 1
    uv_loss = rast[..., :2] * weights((1, Hs, Ws, 2), 1, ctx.device)
    db_loss = rast_db * (1 - on_edge) * weights((1, Hs, Ws, 4), 2, ctx.device)
    (g,) = torch.autograd.grad(uv_loss.sum() + db_loss.sum(), p, retain_graph=True)
    assert torch.isfinite(g).all()
    (g_edge,) = torch.autograd.grad((uv_loss * on_edge).sum(), p)
    assert torch.isfinite(g_edge).all() and (g_edge[0, 1] == 0).all() and (g_edge[0, 0] != 0).any()
    if isinstance(ctx, prerast.RasterizeCpuContext):
        ref, ref_db = exact_raster.rasterize(pos.numpy(), tri.numpy(), Hs, Ws)
        assert np.array_equal(r.numpy().view(np.uint32), ref.view(np.uint32))
        assert np.array_equal(db.numpy().view(np.uint32), ref_db.view(np.uint32))


# --- cube maps ---------------------------------------------------------------------------------------------


def cube_lookup(device, tex, d, dd, s, filter_mode):
    """The lookup of directions d * s (and their derivatives dd * s), with gradients to both."""
    u = (d.double() * s).float().to(device).requires_grad_(True)
    da = (dd.double() * s).float().to(device).requires_grad_(True) if dd is not None else None
    out = prerast.texture(tex.to(device), u, da, filter_mode=filter_mode, boundary_mode="cube")
    (out * weights(out.shape, 5, device)).sum().backward()
    return out.detach().cpu(), u.grad.cpu(), da.grad.cpu() if da is not None else None


@pytest.mark.parametrize("filter_mode", ["linear", "linear-mipmap-linear"])
@pytest.mark.parametrize("s", POW2 + OTHER)
def test_cube_lookup_ignores_direction_length(device, filter_mode, s):
    g = torch.Generator().manual_seed(6)
    tex = torch.rand(1, 6, 8, 8, 3, generator=g)
    d = torch.randn(1, 6, 7, 3, generator=g)
    dd = torch.randn(1, 6, 7, 6, generator=g) * 0.4 if filter_mode != "linear" else None
    out1, gd1, gdd1 = cube_lookup(device, tex, d, dd, 1.0, filter_mode)
    out, gd, gdd = cube_lookup(device, tex, d, dd, s, filter_mode)
    assert (gd1 != 0).any()
    if s in POW2:
        assert same_bits(out, out1)
        assert torch.equal(gd * s, gd1)
        if dd is not None:
            assert torch.equal(gdd * s, gdd1)
        return
    torch.testing.assert_close(out, out1, rtol=0, atol=1e-5)
    assert_scaled_gradient(gd, s, gd1)
    if dd is not None:
        assert_scaled_gradient(gdd, s, gdd1)
