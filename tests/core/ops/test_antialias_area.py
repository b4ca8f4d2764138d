"""antialias of a coverage mask measures area: the mask's sum is the covered screen area and its position gradient
is that area's derivative (analytic, for triangles and polygons of many shapes, orientations and depths; and
finite differences of the forward over steps of a pixel or more, where the sum is smooth). Each silhouette crossing
is blended by one pixel-pair direction only: a horizontal pair for edges closer to vertical, a vertical pair for
the others."""

import numpy as np
import pytest
import torch
from test_antialias import clip_pos, half_plane_expected, render, to_pixels
from test_antialias_grad import crossing_of

import reference_shading as ref


def polygon_area_grad(xy, w, height, width):
    """The area of the polygon with NDC vertices xy [V, 2] (in order) in pixels, and its gradient with
    respect to the clip-space (x, y, w) of each vertex (clip x = ndc x * w)."""
    xy, w = np.asarray(xy, np.float64), np.asarray(w, np.float64)
    P = to_pixels(xy, height, width)
    X, Y = P[:, 0], P[:, 1]
    nxt, prv = np.roll(np.arange(len(P)), -1), np.roll(np.arange(len(P)), 1)
    signed = 0.5 * np.sum(X * Y[nxt] - X[nxt] * Y)
    s = np.sign(signed)
    dX = s * 0.5 * (Y[nxt] - Y[prv])  # d|area| / d pixel X_i
    dY = s * 0.5 * (X[prv] - X[nxt])
    # Pixel X = (x / w + 1) * W / 2 - 1/2 of clip (x, w): dX/dx = W / (2 w), dX/dw = -x W / (2 w^2), x = ndc * w.
    gx = dX * width / (2 * w)
    gy = dY * height / (2 * w)
    gw = -(dX * xy[:, 0] * width + dY * xy[:, 1] * height) / (2 * w)
    return abs(signed), np.stack([gx, gy, gw], -1)


def mask_sum_and_grad(ctx, pos, tri, res, boost=1.0):
    """The antialiased coverage mask's sum and its gradient to the clip (x, y, w) of every vertex."""
    p = pos.to(ctx.device).clone().requires_grad_(True)
    out, _, _ = render(ctx, p, tri, res, color_fn=lambda r: (r[..., 3:] > 0).float(), pos_gradient_boost=boost)
    out.sum().backward()
    g = p.grad[0].cpu().double().numpy()
    return out.sum().item(), g[:, [0, 1, 3]]


def random_triangle(rng):
    """A triangle well inside the screen: centre, size 0.3-0.9 NDC, any orientation and shape."""
    centre = rng.uniform(-0.25, 0.25, 2)
    angles = rng.uniform(0, 2 * np.pi) + np.array([0, 2, 4]) * np.pi / 3 + rng.uniform(-0.7, 0.7, 3)
    radii = rng.uniform(0.3, 0.6, 3)
    xy = centre + radii[:, None] * np.stack([np.cos(angles), np.sin(angles)], -1)
    return xy


def relative_error(got, want):
    return np.abs(got - want).max() / np.abs(want).max()


@pytest.mark.parametrize("seed", range(12))
def test_triangle_mask_gradient_is_the_area_derivative(ctx, seed):
    rng = np.random.default_rng(seed)
    H, W = (192, 256) if seed % 2 else (256, 192)  # not square: the direction rule is in pixels, not NDC
    xy = random_triangle(rng)
    w = rng.uniform(0.6, 1.8, 3) if seed % 3 else np.ones(3)
    area, want = polygon_area_grad(xy, w, H, W)
    pos = clip_pos(xy, w)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    total, got = mask_sum_and_grad(ctx, pos, tri, (H, W))
    assert total == pytest.approx(area, rel=3e-3)
    # Only the pairs within a pixel of a corner see two edges; the rest follow the edges exactly. (Both pair
    # directions blending every crossing made this about 1.0: twice the derivative.)
    assert relative_error(got, want) < 0.05, (got, want)
    assert np.sum(got * want) / np.sum(want * want) == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("boost", [1.0, 2.5])
def test_gradient_boost_scales_the_area_derivative(ctx, boost):
    xy = np.array([[-0.6, -0.5], [0.7, -0.2], [-0.1, 0.65]])
    H = W = 96
    _, want = polygon_area_grad(xy, np.ones(3), H, W)
    _, got = mask_sum_and_grad(ctx, clip_pos(xy), torch.tensor([[0, 1, 2]], dtype=torch.int32), (H, W), boost)
    assert relative_error(got, boost * want) < 0.05


def star(n, inner, outer, phase, centre=(0.0, 0.0)):
    k = np.arange(2 * n)
    r = np.where(k % 2 == 0, outer, inner)
    a = phase + np.pi * k / n
    return np.asarray(centre) + r[:, None] * np.stack([np.cos(a), np.sin(a)], -1)


@pytest.mark.parametrize("shape", ["hexagon", "star5", "star7"])
def test_polygon_mask_gradient_is_the_area_derivative(ctx, shape):
    # A polygon fanned from an inner centre vertex: its inner edges continue the surface (no blend, and the centre
    # gets no gradient), and its outline, convex or not, moves the area as the shoelace formula says.
    H, W = 240, 240
    outline = {
        "hexagon": star(3, 0.7, 0.7, 0.2),
        "star5": star(5, 0.35, 0.8, 0.1),
        "star7": star(7, 0.45, 0.75, 0.33, (0.05, -0.04)),
    }[shape]
    n = len(outline)
    xy = np.concatenate([outline, [[0.02, 0.01]]])
    tri = torch.tensor([[i, (i + 1) % n, n] for i in range(n)], dtype=torch.int32)
    area, want = polygon_area_grad(outline, np.ones(n), H, W)
    total, got = mask_sum_and_grad(ctx, clip_pos(xy), tri, (H, W))
    assert total == pytest.approx(area, rel=1e-3)
    assert np.abs(got[n]).max() < 1e-6 * np.abs(want).max()  # the centre is inside the surface
    # Sharp corners (the stars') cost a pixel's worth of each of their two edges.
    assert relative_error(got[:n], want) < 0.05, (got[:n], want)
    assert np.sum(got[:n] * want) / np.sum(want * want) == pytest.approx(1.0, abs=0.02)


def test_mask_gradient_matches_finite_differences_of_its_area(ctx):
    # At 384^2, steps of a pixel and more shift each edge's crossings on hundreds of rows, so the switches of
    # single pairs' blends average out: the forward sum's central difference is then its smooth rate, which the
    # analytic gradient must equal.
    H = W = 384
    rng = np.random.default_rng(11)
    xy = random_triangle(rng)
    w = rng.uniform(0.7, 1.5, 3)
    pos = clip_pos(xy, w)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    _, got = mask_sum_and_grad(ctx, pos, tri, (H, W))
    h = 1.5 * 2 / W
    for v in range(3):
        for col, c in ((0, 0), (1, 1), (2, 3)):
            d = torch.zeros_like(pos)
            d[0, v, c] = h * (w[v] if c < 3 else 0.05 / h)
            step = d[0, v, c].item()
            plus, _ = mask_sum_and_grad(ctx, pos + d, tri, (H, W))
            minus, _ = mask_sum_and_grad(ctx, pos - d, tri, (H, W))
            numeric = (plus - minus) / (2 * step)
            assert got[v, col] == pytest.approx(numeric, rel=0.03, abs=0.03 * np.abs(got).max()), (v, c)


@pytest.mark.parametrize("degrees", [0, 12, 30, 44, 46, 60, 78, 90, 105, 134, 136, 150, 170])
def test_edge_at_any_angle_is_blended_by_one_pair_direction(ctx, degrees):
    # A half plane whose edge makes `degrees` with the x axis on screen: every pixel gets the exact coverage of
    # the crossings of its own direction, and the raw op marks crossings in that direction only.
    H, W = 30, 40
    a = np.radians(degrees)
    d = np.array([np.cos(a) * 2 / W, np.sin(a) * 2 / H])  # one pixel along the edge, in NDC
    d /= np.linalg.norm(d)
    n = np.array([-d[1], d[0]])
    c = np.array([0.07, -0.05])
    xy = np.array([c - 9 * d, c + 9 * d, c + 9 * n])
    pos = clip_pos(xy, [1.0, 1.3, 0.8])
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    out, color, rast = render(ctx, pos, tri, (H, W))
    cov, want = half_plane_expected(rast, xy, H, W)
    assert 0.2 < cov.mean() < 0.8
    np.testing.assert_allclose(out[0].cpu().numpy(), want, atol=2e-5)
    crossing = crossing_of(color, rast, pos.to(ctx.device), tri.to(ctx.device))[0].cpu()
    steep = abs(np.sin(a)) >= abs(np.cos(a))  # |dy| >= |dx| in pixels
    used, unused = (0, 1) if steep else (1, 0)
    assert (crossing[..., used] >= 0).sum() >= 10
    assert not (crossing[..., unused] >= 0).any()


def test_crossing_is_counted_once_where_both_directions_see_it(ctx):
    # The case the rule exists for: a 45-degree-ish edge has crossings on horizontal and vertical pairs alike.
    # Blending both would double the gradient; the sum's gradient must be the area derivative (1 x the edge's
    # projected length per unit of motion), not twice it.
    H = W = 64
    xy = np.array([[-0.7, -0.62], [0.66, 0.71], [-0.75, 0.68]])
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    _, want = polygon_area_grad(xy, np.ones(3), H, W)
    _, got = mask_sum_and_grad(ctx, clip_pos(xy), tri, (H, W))
    ratio = np.sum(got * want) / np.sum(want * want)
    assert ratio == pytest.approx(1.0, abs=0.05)


def test_an_edge_at_exactly_45_degrees_goes_to_the_horizontal_pairs(ctx):
    # Float-exact vertices whose edge runs 24 pixels right and 24 up in a 32 x 16 image (NDC steps 1.5 and 3):
    # |dy| = |dx| on screen exactly, a tie the rule gives to the horizontal pairs. The other two edges are off
    # screen, and no pixel centre lies on the edge's line.
    H, W = 16, 32
    xy = np.array([[-0.71875, -1.5], [0.78125, 1.5], [-3.0, 1.5]])
    pos, tri = clip_pos(xy), torch.tensor([[0, 1, 2]], dtype=torch.int32)
    out, color, rast = render(ctx, pos, tri, (H, W))
    crossing = crossing_of(color, rast, pos.to(ctx.device), tri.to(ctx.device))[0].cpu()
    assert (crossing[..., 0] >= 0).sum() >= 10
    assert not (crossing[..., 1] >= 0).any()
    A, B, _ = to_pixels(xy, H, W)
    assert abs(B - A)[0] == abs(B - A)[1]
    np.testing.assert_allclose(out[0].cpu().numpy(), half_plane_expected(rast, xy, H, W)[1], atol=2e-5)


def scattered_wedges(rng, count=30):
    """count separate triangles, each with one sharp and one wide corner, of random orientation and depth."""
    xy, tri = [], []
    for k in range(count):
        centre, turn, size = rng.uniform(-0.8, 0.8, 2), rng.uniform(0, 2 * np.pi), rng.uniform(0.1, 0.3)
        angles = turn + np.array([0, rng.uniform(0.3, 1.2), rng.uniform(2.5, 3.5)])
        xy += list(centre + size * np.stack([np.cos(angles), np.sin(angles)], -1))
        tri.append([3 * k, 3 * k + 1, 3 * k + 2])
    z = np.repeat(rng.uniform(-0.5, 0.5, count), 3)
    return clip_pos(np.array(xy), z=z), torch.tensor(tri, dtype=torch.int32)


@pytest.mark.parametrize("seed", range(2))
def test_a_pair_that_leaves_through_the_other_directions_edge_is_left_alone(ctx, seed):
    # Near a corner the segment between two pixel centres can leave the front triangle through an edge of the
    # other direction and only then cross the line of an edge of its own: that crossing lies outside the
    # triangle, and the other direction's pairs resolve the edge it left through. The NumPy model marks such
    # pairs (past_exit); the plugin must leave them alone and match the model everywhere else.
    H = W = 64
    pos, tri = scattered_wedges(np.random.default_rng(seed))
    g = torch.Generator().manual_seed(seed)
    color_fn = lambda r: torch.rand(r.shape[:3] + (3,), generator=g).to(r.device)  # noqa: E731
    out, color, rast = render(ctx, pos, tri, (H, W), color_fn=color_fn)
    want, pairs = ref.antialias(color.cpu().numpy(), rast.cpu().numpy(), pos[0].numpy(), tri.numpy())
    crossing = crossing_of(color, rast, pos.to(ctx.device), tri.to(ctx.device))[0].cpu()
    past = [p for p in pairs if p.get("past_exit") and p["margin"] > 1e-3]
    assert len(past) >= 4
    for p in past:
        (y, x), (y2, _) = p["p"], p["q"]
        assert crossing[y, x, 0 if y2 == y else 1] < 0, p
    unsure = np.zeros((H, W), bool)
    for p in pairs:
        if p["margin"] < 1e-3:
            unsure[p["p"]] = unsure[p["q"]] = True
    assert unsure.mean() < 0.01
    np.testing.assert_allclose(out[0].cpu().numpy()[~unsure], want[0][~unsure], atol=2e-5)
