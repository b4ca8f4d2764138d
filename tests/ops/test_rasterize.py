import numpy as np
import pytest
import torch

import prerast
import reference
from conftest import make_ctx
from scenes import random_scene, to_torch


def check_against_reference(rast, pos, tri, H, W, ranges=None):
    ref, ambiguous, near_cover = reference.rasterize(pos, tri, H, W, ranges)
    ids = rast[..., 3].astype(np.int64)
    clear = ~ambiguous
    assert clear.mean() > 0.9, "scene too degenerate to test"
    np.testing.assert_array_equal(ids[clear], ref[..., 3][clear].astype(np.int64))
    drawn = clear & (ids > 0)
    np.testing.assert_allclose(rast[..., :3][drawn], ref[..., :3][drawn], atol=2e-4, rtol=1e-3)
    assert (rast[~(ids > 0)] == 0).all(), "background pixels must be all zero"
    # Where rounding may decide, the winner must still be a triangle covering the pixel (or background).
    n, y, x = np.nonzero(ambiguous)
    assert near_cover[n, ids[n, y, x], y, x].all()
    return ref


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("perspective", [False, True])
def test_matches_numpy_reference(ctx, seed, perspective):
    rng = np.random.default_rng(seed)
    pos, tri = random_scene(rng, num_images=2, num_tris=25, perspective=perspective)
    H, W = 48, 64
    rast, rast_db = prerast.rasterize(ctx, *to_torch(pos, tri, ctx.device), (H, W))
    assert rast.shape == (2, H, W, 4) and rast_db.shape == (2, H, W, 4)
    check_against_reference(rast.cpu().numpy(), pos, tri, H, W)


def test_conventions_single_triangle(ctx):
    # Vertex 0 -> (u, v) = (1, 0), vertex 1 -> (0, 1), vertex 2 -> (0, 0); row 0 is the bottom row.
    pos = torch.tensor([[[-1.0, -1.0, 0.5, 1.0], [3.0, -1.0, 0.5, 1.0], [-1.0, 3.0, 0.5, 1.0]]], device=ctx.device)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=ctx.device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (4, 4))
    r = rast[0].cpu()
    assert (r[..., 3] == 1).all()
    # pixel (0, 0) at NDC (-0.75, -0.75): barycentrics u = 1 - (x+1)/4 - (y+1)/4, v = (x+1)/4
    torch.testing.assert_close(r[0, 0, :3], torch.tensor([0.875, 0.0625, 0.5]))
    assert r[0, 3, 1] > r[0, 0, 1]  # v grows with x


def test_empty_and_zero_images(ctx):
    pos = torch.zeros(3, 0, 4, device=ctx.device)
    tri = torch.zeros(0, 3, dtype=torch.int32, device=ctx.device)
    rast, db = prerast.rasterize(ctx, pos, tri, (5, 7))
    assert rast.shape == (3, 5, 7, 4) and (rast == 0).all() and (db == 0).all()
