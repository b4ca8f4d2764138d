"""antialias against exact edge coverage, the NumPy model, finite differences, and an optimisation loop."""

import numpy as np
import pytest
import torch

import prerast
import reference_shading as ref
from conftest import make_ctx

INSIDE = np.array([1.0, 0.5, 0.25], np.float32)
OUTSIDE = np.array([0.0, 0.2, 0.7], np.float32)


def clip_pos(xy, w=None, z=None):
    """[1, V, 4] clip-space positions from NDC xy [V, 2], per-vertex w (perspective) and z/w."""
    xy = np.asarray(xy, np.float64)
    w = np.ones(len(xy)) if w is None else np.asarray(w, np.float64)
    z = np.zeros(len(xy)) if z is None else np.asarray(z, np.float64)
    return torch.tensor(np.concatenate([xy * w[:, None], (z * w)[:, None], w[:, None]], -1)[None], dtype=torch.float32)


def two_tone(rast, inside=INSIDE, outside=OUTSIDE):
    """Constant colour on every triangle, another on the background."""
    covered = (rast[..., 3:] > 0).float()
    return covered * torch.tensor(inside, device=rast.device) + (1 - covered) * torch.tensor(
        outside, device=rast.device
    )


def render(ctx, pos, tri, res, color_fn=two_tone, **kw):
    pos, tri = pos.to(ctx.device), tri.to(ctx.device)
    rast, _ = prerast.rasterize(ctx, pos, tri, res)
    color = color_fn(rast)
    return prerast.antialias(color, rast, pos, tri, **kw), color, rast


def to_pixels(xy, height, width):
    xy = np.asarray(xy, np.float64)
    return np.stack([(xy[..., 0] + 1) * width / 2 - 0.5, (xy[..., 1] + 1) * height / 2 - 0.5], -1)


TRI1 = torch.tensor([[0, 1, 2]], dtype=torch.int32)


@pytest.mark.parametrize("edge", [0.13, -0.52, 0.71])
@pytest.mark.parametrize("axis", ["x", "y"])
@pytest.mark.parametrize("w", [(1, 1, 1), (2.0, 0.6, 1.3)])
def test_axis_aligned_edge_gets_exact_pixel_coverage(ctx, edge, axis, w):
    # A triangle whose only on-screen edge is the line {axis = edge}; inside is below it. Each pixel's output
    # must be exactly the share of its area that the triangle covers.
    H, W = 12, 16
    xy = np.array([[edge, -3.0], [edge, 3.0], [-3.0, 0.0]])
    if axis == "y":
        xy = xy[:, ::-1]
    out, _, _ = render(ctx, clip_pos(xy, w), TRI1, (H, W))
    size = W if axis == "x" else H
    e = (edge + 1) * size / 2 - 0.5  # edge position in pixel units; pixel i covers [i - 1/2, i + 1/2]
    cov = np.clip(e - (np.arange(size) - 0.5), 0, 1)
    cov = np.broadcast_to(cov[None, :] if axis == "x" else cov[:, None], (H, W))
    want = OUTSIDE + cov[..., None] * (INSIDE - OUTSIDE)
    np.testing.assert_allclose(out[0].cpu().numpy(), want, atol=2e-5)


@pytest.mark.parametrize("seed", range(4))
def test_slanted_edge_gets_exact_segment_coverage(ctx, seed):
    rng = np.random.default_rng(seed)
    H, W = 18, 22
    y0, y1 = rng.uniform(-0.8, 0.8, 2)
    below = rng.random() < 0.5
    xy = np.array([[-3.0, y0], [3.0, y1], [0.0, -6.0 if below else 6.0]])
    w = rng.uniform(0.5, 2.5, 3)
    out, _, rast = render(ctx, clip_pos(xy, w), TRI1, (H, W))
    cov, want = half_plane_expected(rast, xy, H, W)
    assert 0 < cov.mean() < 1
    np.testing.assert_allclose(out[0].cpu().numpy(), want, atol=2e-5)


def half_plane_expected(rast, xy, height, width):
    """(coverage, two_tone colours) expected where only the edge xy[0] -> xy[1] of triangle xy (NDC) is on screen:
    ref.half_plane_coverage of its line, inside on xy[2]'s side."""
    a, b, c = to_pixels(xy, height, width)
    sign = np.sign(ref._cross2(b - a, c - a))
    line = lambda x, y: sign * ref._cross2(b - a, np.array([x, y]) - a)  # noqa: E731  (> 0 inside)
    cov = ref.half_plane_coverage(height, width, rast[0, ..., 3].cpu().numpy() > 0, line)
    return cov, OUTSIDE + cov[..., None] * (INSIDE - OUTSIDE)


def folded_pair(third, shared=True, flip=False):
    """Triangle F = (p0, p1, p2) in front and G on F's edge p1-p2 with third vertex `third` behind F."""
    xy = [[-0.7, -0.6], [0.6, -0.5], [0.0, 0.7], third]
    z = [0.0, 0.0, 0.0, 0.5]
    g = [2, 1, 3] if not flip else [1, 2, 3]
    tri = [[0, 1, 2], g]
    if not shared:
        xy += [xy[1], xy[2]]
        z += [0.0, 0.0]
        tri[1] = [5, 4, 3] if not flip else [4, 5, 3]
    return clip_pos(xy, z=z), torch.tensor(tri, dtype=torch.int32)


def per_triangle_colour(rast):
    palette = torch.tensor([[0.1, 0.1, 0.1], [1.0, 0.3, 0.2], [0.2, 0.9, 0.4]], device=rast.device)
    return palette[rast[..., 3].long()]


@pytest.mark.parametrize("flip", [False, True])
def test_edge_inside_a_surface_is_not_blended(ctx, flip):
    # G continues F across their shared edge (either winding): pixels along it are left alone, while F's other
    # edges (against the background) are blended.
    H, W = 24, 24
    pos, tri = folded_pair([0.8, 0.6], flip=flip)
    out, color, rast = render(ctx, pos, tri, (H, W), color_fn=per_triangle_colour)
    changed = (out != color).any(-1)[0].cpu().numpy()
    ids = rast[0, ..., 3].cpu().numpy()
    f_g = np.zeros_like(changed)
    f_g[:, :-1] |= ids[:, :-1] * ids[:, 1:] == 2
    f_g[:, 1:] |= ids[:, :-1] * ids[:, 1:] == 2
    f_g[:-1] |= ids[:-1] * ids[1:] == 2
    f_g[1:] |= ids[:-1] * ids[1:] == 2
    assert f_g.sum() > 10 and changed.sum() > 10
    touches_background = np.zeros_like(changed)
    for axis in (0, 1):
        for shift in (1, -1):
            touches_background |= np.roll(ids, shift, axis) == 0
    assert not (changed & f_g & ~touches_background).any()


@pytest.mark.parametrize("case", ["fold", "split_vertices"])
def test_silhouettes_are_blended(ctx, case):
    # fold: G lies on F's side of the shared edge (behind F), so the edge is a contour; split_vertices: G is
    # across the edge but uses its own copies of the two vertices, so by index the edge is a boundary.
    H, W = 24, 24
    pos, tri = folded_pair([0.1, -0.1] if case == "fold" else [0.8, 0.6], shared=case == "fold")
    out, color, rast = render(ctx, pos, tri, (H, W), color_fn=per_triangle_colour)
    want, pairs = ref.antialias(color.cpu().numpy(), rast.cpu().numpy(), pos[0].numpy(), tri.numpy())
    on_edge = [p for p in pairs if p["blended"] and set(p["edge"]) in ({1, 2}, {4, 5})]
    assert len(on_edge) > 3, "the shared edge must be a silhouette"
    assert min(p["margin"] for p in pairs) > 1e-3
    np.testing.assert_allclose(out[0].cpu().numpy(), want[0], atol=2e-5)


def grid_mesh(rng, n=5, jitter=0.12, images=2):
    """A perspective height field of n x n quads, jittered so that some triangles fold over."""
    u = np.linspace(-0.85, 0.85, n + 1)
    gx, gy = np.meshgrid(u, u)
    tri = []
    for i in range(n):
        for j in range(n):
            a, b, c, d = i * (n + 1) + j, i * (n + 1) + j + 1, (i + 1) * (n + 1) + j, (i + 1) * (n + 1) + j + 1
            tri += [[a, b, d], [a, d, c]]
    pos = []
    for _ in range(images):
        xy = np.stack([gx, gy], -1).reshape(-1, 2) + rng.uniform(-jitter, jitter, ((n + 1) ** 2, 2))
        w = rng.uniform(0.7, 2.0, len(xy))
        z = rng.uniform(-0.5, 0.5, len(xy))
        pos.append(np.concatenate([xy * w[:, None], (z * w)[:, None], w[:, None]], -1))
    return torch.tensor(np.array(pos), dtype=torch.float32), torch.tensor(tri, dtype=torch.int32)


@pytest.mark.parametrize("seed", range(3))
def test_matches_reference_on_meshes(ctx, seed):
    rng = np.random.default_rng(seed)
    pos, tri = grid_mesh(rng, jitter=0.25)
    H, W = 26, 30
    color_fn = lambda r: torch.rand(r.shape[:3] + (2,), generator=torch.Generator().manual_seed(seed)).to(r.device)  # noqa: E731
    out, color, rast = render(ctx, pos, tri, (H, W), color_fn=color_fn)
    want, pairs = ref.antialias(color.cpu().numpy(), rast.cpu().numpy(), pos.numpy(), tri.numpy())
    assert sum(p["blended"] for p in pairs) > 40
    # Pixels next to a decision within rounding distance of flipping may legitimately differ.
    unsure = np.zeros(want.shape[:3], bool)
    for p in pairs:
        if p["margin"] < 1e-3:
            unsure[p["n"]][p["p"]] = unsure[p["n"]][p["q"]] = True
    assert unsure.mean() < 0.01
    np.testing.assert_allclose(out.cpu().numpy()[~unsure], want[~unsure], atol=2e-5)


def test_range_mode_matches_instanced(ctx):
    pos, tri = grid_mesh(np.random.default_rng(7), images=1)
    pos, tri = pos.to(ctx.device), tri.to(ctx.device)
    rast_i, _ = prerast.rasterize(ctx, pos.expand(2, -1, -1).contiguous(), tri, (20, 20))
    rast_r, _ = prerast.rasterize(
        ctx, pos[0], tri, (20, 20), ranges=torch.tensor([[0, 50], [0, 50]], dtype=torch.int32)
    )
    assert torch.equal(rast_i, rast_r)
    color = torch.rand(2, 20, 20, 3, device=ctx.device)
    results = []
    for p, rast in ((pos.expand(2, -1, -1).contiguous(), rast_i), (pos[0], rast_r)):
        p = p.clone().requires_grad_(True)
        c = color.clone().requires_grad_(True)
        out = prerast.antialias(c, rast, p, tri)
        (out * torch.linspace(0, 1, 3, device=ctx.device)).sum().backward()
        results.append((out, c.grad, p.grad.reshape(-1, *pos.shape[1:]).sum(0)))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_topology_hash_reuse_and_layout(device):
    tri = torch.tensor([[0, 1, 2], [2, 1, 3], [3, 4, 2]], dtype=torch.int32, device=device)
    topo = prerast.antialias_construct_topology_hash(tri)
    assert topo.num_triangles == 3 and "edges=7" in repr(topo)
    groups = {}
    for h in range(9):
        g = int(topo.group_of[h])
        members = topo.half_edges[topo.group_start[g] : topo.group_start[g + 1]].tolist()
        assert h in members
        groups.setdefault(g, members)
    t = tri.cpu().tolist()
    for members in groups.values():  # every half-edge in a group has the same two vertices
        keys = {frozenset((t[h // 3][(h % 3 + 1) % 3], t[h // 3][(h % 3 + 2) % 3])) for h in members}
        assert len(keys) == 1
    ctx = make_ctx(device)
    pos, tri2 = grid_mesh(np.random.default_rng(1), images=1)
    pos, tri2 = pos.to(device), tri2.to(device)
    rast, _ = prerast.rasterize(ctx, pos, tri2, (16, 16))
    color = torch.rand(1, 16, 16, 3, device=device)
    topo2 = prerast.antialias_construct_topology_hash(tri2)
    assert torch.equal(prerast.antialias(color, rast, pos, tri2, topo2), prerast.antialias(color, rast, pos, tri2))


def test_color_gradient_matches_finite_differences(ctx):
    pos, tri = grid_mesh(np.random.default_rng(2), images=1)
    pos, tri = pos.to(ctx.device), tri.to(ctx.device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (14, 14))
    g = torch.Generator().manual_seed(0)
    color = torch.rand(1, 14, 14, 2, generator=g).to(ctx.device)
    weight = torch.randn(1, 14, 14, 2, generator=g).to(ctx.device)
    loss = lambda c: (prerast.antialias(c, rast, pos, tri).double() * weight).sum()  # noqa: E731
    c = color.clone().requires_grad_(True)
    loss(c).backward()
    crossing = torch.ops.prerast.antialias_fwd(
        color, rast, pos, tri, *vars_of(prerast.antialias_construct_topology_hash(tri))
    )[1]
    blended = (crossing >= 0).any(-1)
    ys, xs = torch.nonzero(blended[0], as_tuple=True)
    assert len(ys) > 10
    for y, x in list(zip(ys.tolist(), xs.tolist()))[:15] + [(0, 0)]:
        for ch in range(2):
            d = torch.zeros_like(color)
            d[0, y, x, ch] = 1e-2
            numeric = (loss(color + d) - loss(color - d)).item() / 2e-2
            assert c.grad[0, y, x, ch].item() == pytest.approx(numeric, rel=1e-3, abs=1e-4)


def vars_of(topo):
    return topo.half_edges, topo.group_of, topo.group_start
