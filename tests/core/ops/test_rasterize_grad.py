"""rasterize gradients against central finite differences, on pixels whose coverage cannot change."""

import numpy as np
import pytest
import torch

import prerast


def big_triangles(perspective):
    """Two large non-overlapping triangles so that most covered pixels sit far from any edge."""
    xy = np.array([[-0.9, -0.8], [0.7, -0.9], [-0.6, 0.8], [0.9, -0.5], [0.8, 0.9], [-0.3, 0.95]])
    w = np.array([1.0, 1.7, 0.8, 1.3, 0.9, 2.0]) if perspective else np.ones(6)
    z = np.array([0.1, -0.2, 0.3, 0.0, 0.4, -0.1])
    pos = np.concatenate([xy * w[:, None], (z * w)[:, None], w[:, None]], -1)
    return torch.tensor(pos[None], dtype=torch.float32), torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)


def interior_mask(rast, margin=2):
    """Pixels covered, whose every neighbour within `margin` shows the same triangle."""
    ids = rast[..., 3]
    keep = ids > 0
    for dy in range(-margin, margin + 1):
        for dx in range(-margin, margin + 1):
            keep &= torch.roll(ids, (dy, dx), dims=(1, 2)) == ids
    keep[:, :margin] = keep[:, -margin:] = keep[:, :, :margin] = keep[:, :, -margin:] = False
    return keep


@pytest.mark.parametrize("perspective", [False, True])
@pytest.mark.parametrize("with_db", [False, True])
def test_pos_gradient_matches_finite_differences(ctx, perspective, with_db):
    pos, tri = big_triangles(perspective)
    pos, tri = pos.to(ctx.device), tri.to(ctx.device)
    H, W = 24, 28
    g = torch.Generator().manual_seed(0)
    w_rast = torch.randn(1, H, W, 4, generator=g).to(ctx.device)
    w_db = torch.randn(1, H, W, 4, generator=g).to(ctx.device)
    with torch.no_grad():
        mask = interior_mask(prerast.rasterize(ctx, pos, tri, (H, W))[0])[..., None].float()
    assert mask.sum() > 80

    def loss(p):
        rast, db = prerast.rasterize(ctx, p, tri, (H, W), grad_db=with_db)
        total = (rast[..., :2] * w_rast[..., :2] * mask).double().sum()
        if with_db:
            total = total + (db * w_db * mask).double().sum() * 10
        return total

    p = pos.clone().requires_grad_(True)
    loss(p).backward()
    analytic = p.grad.cpu().double()
    numeric = torch.zeros_like(analytic)
    h = 1e-3
    for v in range(pos.shape[1]):
        for c in range(4):
            d = torch.zeros_like(pos)
            d[0, v, c] = h
            with torch.no_grad():
                numeric[0, v, c] = (loss(pos + d) - loss(pos - d)) / (2 * h)
    assert (analytic[..., 2] == 0).all(), "z gets no gradient"
    torch.testing.assert_close(analytic, numeric, rtol=2e-2, atol=2e-2 * numeric.abs().max().item())


def test_no_gradient_from_depth_or_id(ctx):
    pos, tri = big_triangles(True)
    p = pos.to(ctx.device).requires_grad_(True)
    rast, db = prerast.rasterize(ctx, p, tri.to(ctx.device), (16, 16))
    (rast[..., 2:].sum()).backward()
    assert (p.grad == 0).all()


def test_grad_db_false_blocks_rast_db_gradient(ctx):
    pos, tri = big_triangles(True)
    p = pos.to(ctx.device).requires_grad_(True)
    rast, db = prerast.rasterize(ctx, p, tri.to(ctx.device), (16, 16), grad_db=False)
    db.sum().backward()
    assert (p.grad == 0).all()
    p.grad = None
    rast, db = prerast.rasterize(ctx, p, tri.to(ctx.device), (16, 16), grad_db=True)
    db.sum().backward()
    assert p.grad.abs().sum() > 0


def test_range_mode_gradient_accumulates_over_images(ctx):
    # Range mode shares pos between images: the gradient is the sum of each image's.
    pos, tri = big_triangles(True)
    pos, tri = pos[0].to(ctx.device), tri.to(ctx.device)
    ranges = torch.tensor([[0, 1], [0, 2], [1, 1]], dtype=torch.int32)
    p = pos.clone().requires_grad_(True)
    rast, _ = prerast.rasterize(ctx, p, tri, (20, 20), ranges=ranges)
    rast[..., :2].sum().backward()
    total = torch.zeros_like(pos)
    for r in ranges:
        q = pos.clone().requires_grad_(True)
        single, _ = prerast.rasterize(ctx, q, tri, (20, 20), ranges=r[None])
        single[..., :2].sum().backward()
        total += q.grad
    torch.testing.assert_close(p.grad, total, rtol=1e-4, atol=1e-4)
