"""A batched multi-view silhouette fit, written as multi-view reconstruction programs use nvdiffrast: one mesh, K
cameras as one instanced batch of clip-space positions, antialiased coverage masks, a loss against target masks and
gradients to the shared vertices. The masks are checked against the projected convex hull (area and inside /
outside pixels), the vertex gradients against finite differences of the same forward, and the fit against the
true mesh."""

import numpy as np
import torch
from cameras import clip_positions, distance_inside, hull, octahedron, orbit, pixel_grid, polygon_area

import prerast
from conftest import make_ctx
from finite_diff import check_gradients

H, W, VIEWS = 40, 48, 4


def silhouettes(ctx, verts, tri, mvp):
    pos = clip_positions(verts, mvp)
    rast, _ = prerast.rasterize(ctx, pos, tri, (H, W))
    return prerast.antialias((rast[..., 3:] > 0).float(), rast, pos, tri)


def scene(device):
    v, tri = octahedron()
    return (
        torch.tensor(v, dtype=torch.float32, device=device),
        torch.tensor(tri, device=device),
        torch.tensor(orbit(VIEWS), dtype=torch.float32, device=device),
        v,
    )


def test_masks_are_the_projected_hulls(device):
    ctx = make_ctx(device)
    verts, tri, mvp, v64 = scene(device)
    masks = silhouettes(ctx, verts, tri, mvp)[..., 0].cpu().double().numpy()
    px, py = pixel_grid(H, W)
    for k, m in enumerate(orbit(VIEWS)):
        clip = np.c_[v64, np.ones(len(v64))] @ m.T
        screen = (clip[:, :2] / clip[:, 3:] + 1) / 2 * [W, H]  # NDC -> pixels
        poly = hull(screen)
        area = polygon_area(poly)
        assert 120 < area < 0.6 * H * W
        # The silhouette of a convex mesh is the hull of its projected vertices: the mask covers its area (up to
        # the hull's corners, where two edges pass one pixel and blending by pixel pairs is approximate)...
        assert abs(masks[k].sum() - area) < 0.02 * area + 2, (k, masks[k].sum(), area)
        # ... is 1 a pixel inside it and 0 a pixel outside (antialiasing blends only the pixels an edge passes by).
        d = distance_inside(poly, px, py)
        assert (masks[k][d > 1.5] == 1).all() and (masks[k][d < -1.5] == 0).all()
        assert ((masks[k] > 0) & (masks[k] < 1)).sum() > 10  # the edges are blended


def test_vertex_gradients_match_finite_differences(device):
    ctx = make_ctx(device)
    verts, tri, mvp, _ = scene(device)
    # One vertex shift of 5e-5 moves an edge by about 0.001 pixel: finite differences see the forward's own slope.
    # Where the forward jumps within eps (an edge over a pixel centre), check_gradients skips the element when its
    # one-sided differences disagree by more than 5 %; a jump it misses moves the central difference by less than
    # that, hence rtol just above it. A gradient off by a constant factor (such as 2) still fails.
    check_gradients(
        lambda verts: silhouettes(ctx, verts, tri, mvp),
        {"verts": verts},
        ["verts"],
        eps=5e-5,
        rtol=6e-2,
        atol=5e-2,
        min_checked=0.5,
    )


def test_fit_recovers_the_mesh_from_its_silhouettes(device):
    ctx = make_ctx(device)
    verts, tri, mvp, _ = scene(device)
    target = silhouettes(ctx, verts, tri, mvp).detach()
    start = verts * torch.tensor([1.25, 0.8, 1.15], device=device) + 0.05
    offset = torch.zeros_like(verts, requires_grad=True)
    opt = torch.optim.Adam([offset], lr=0.025)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = (silhouettes(ctx, start + offset, tri, mvp) - target).abs().mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    error = lambda v: float((v - verts).norm(dim=1).mean())  # noqa: E731
    assert losses[-1] < 0.25 * losses[0]
    assert error(start + offset.detach()) < 0.4 * error(start)
