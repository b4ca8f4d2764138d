import numpy as np
import pytest
import torch

import prerast
import reference
from conftest import per_thread_count
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


@pytest.mark.parametrize("seed", range(3))
def test_range_mode_matches_reference(ctx, seed):
    rng = np.random.default_rng(100 + seed)
    pos, tri = random_scene(rng, num_images=1, num_tris=30, perspective=True)
    pos = pos[0]
    ranges = np.array([[0, 10], [5, 20], [29, 1], [0, 0], [0, 30]], dtype=np.int32)
    H, W = 40, 33
    p, t = to_torch(pos, tri, ctx.device)
    rast, _ = prerast.rasterize(ctx, p, t, (H, W), ranges=torch.from_numpy(ranges))
    assert rast.shape == (5, H, W, 4)
    check_against_reference(rast.cpu().numpy(), pos, tri, H, W, ranges)
    # IDs index the whole tri: image 2 can only show triangle 29.
    assert set(np.unique(rast[2, ..., 3].cpu().numpy())) <= {0.0, 30.0}
    assert (rast[3] == 0).all()


def test_range_mode_equals_instanced(ctx):
    rng = np.random.default_rng(7)
    pos, tri = random_scene(rng, num_images=1, num_tris=12)
    p, t = to_torch(pos, tri, ctx.device)
    inst, inst_db = prerast.rasterize(ctx, p, t, (32, 32))
    rng_rast, rng_db = prerast.rasterize(ctx, p[0], t, (32, 32), ranges=torch.tensor([[0, 12]], dtype=torch.int32))
    assert torch.equal(inst, rng_rast) and torch.equal(inst_db, rng_db)


def test_range_mode_with_more_images_than_one_core_call_takes(ctx):
    # Range mode hands the core at most 256 images at a time (the CUDA path passes their table as a kernel
    # argument): 600 images, each checked against the reference.
    rng = np.random.default_rng(11)
    pos, tri = random_scene(rng, num_images=1, num_tris=40, perspective=True)
    first = rng.integers(0, 40, 600)
    ranges = np.stack([first, rng.integers(0, 41 - first)], 1).astype(np.int32)
    p, t = to_torch(pos[0], tri, ctx.device)
    rast, _ = prerast.rasterize(ctx, p, t, (9, 7), ranges=torch.from_numpy(ranges))
    check_against_reference(rast.cpu().numpy(), pos[0], tri, 9, 7, ranges)


@pytest.mark.parametrize("perspective", [False, True])
def test_rast_db_matches_reference(ctx, perspective):
    rng = np.random.default_rng(11)
    pos, tri = random_scene(rng, num_images=2, num_tris=10, perspective=perspective)
    H, W = 40, 56
    rast, db = prerast.rasterize(ctx, *to_torch(pos, tri, ctx.device), (H, W))
    rast, db = rast.cpu().numpy(), db.cpu().numpy()
    ref = reference.rast_db(pos, tri, rast, H, W)
    drawn = rast[..., 3] > 0
    assert drawn.sum() > 100
    np.testing.assert_allclose(db[drawn], ref[drawn], rtol=2e-3, atol=2e-4)
    assert (db[~drawn] == 0).all()


def test_deterministic(ctx):
    rng = np.random.default_rng(3)
    pos, tri = random_scene(rng, num_images=2, num_tris=200, perspective=True)
    p, t = to_torch(pos, tri, ctx.device)
    a = prerast.rasterize(ctx, p, t, (64, 80))
    for _ in range(3):
        b = prerast.rasterize(ctx, p, t, (64, 80))
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_cpu_thread_count_does_not_change_results():
    rng = np.random.default_rng(5)
    pos, tri = random_scene(rng, num_images=1, num_tris=300, perspective=True)
    p, t = to_torch(pos, tri, "cpu")
    p.requires_grad_(True)
    ctx = prerast.RasterizeCpuContext()

    def run():
        p.grad = None
        rast, db = prerast.rasterize(ctx, p, t, (48, 48))
        (rast[..., :2].sum() + db.sum()).backward()
        return rast.detach(), db.detach(), p.grad.clone()

    outs = per_thread_count(run)
    for rast, db, g in outs[1:]:
        assert torch.equal(rast, outs[0][0]) and torch.equal(db, outs[0][1])
        torch.testing.assert_close(g, outs[0][2], rtol=1e-5, atol=1e-5)


def test_depth_order_ties_go_to_smaller_id(ctx):
    # Two identical triangles: same z/w everywhere, the first (smaller ID) must win, on every pixel.
    pos = torch.tensor([[[-0.9, -0.9, 0.2, 1.0], [0.9, -0.9, 0.2, 1.0], [0.0, 0.9, 0.2, 1.0]]], device=ctx.device)
    tri = torch.tensor([[0, 1, 2], [0, 1, 2]], dtype=torch.int32, device=ctx.device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (16, 16))
    ids = rast[0, ..., 3]
    assert set(ids.unique().tolist()) == {0.0, 1.0}


@pytest.mark.parametrize("res", [(1, 1), (1, 7), (13, 1), (17, 31), (33, 65)])
def test_odd_resolutions(ctx, res):
    rng = np.random.default_rng(21)
    pos, tri = random_scene(rng, num_images=1, num_tris=15, perspective=True)
    rast, _ = prerast.rasterize(ctx, *to_torch(pos, tri, ctx.device), res)
    assert rast.shape == (1, *res, 4)
    ref, ambiguous, near_cover = reference.rasterize(pos, tri, *res)
    ids = rast[..., 3].cpu().numpy().astype(np.int64)
    np.testing.assert_array_equal(ids[~ambiguous], ref[..., 3][~ambiguous])
    n, y, x = np.nonzero(ambiguous)
    assert near_cover[n, ids[n, y, x], y, x].all()


def test_large_resolution_beyond_4096(ctx):
    # A strip wider than 16384 pixels: tiles, indexing and pixel centres must all hold up.
    W = 20000
    pos = torch.tensor([[[-1.0, -1.0, 0.0, 1.0], [1.0, -1.0, 0.0, 1.0], [-1.0, 1.0, 0.0, 1.0]]], device=ctx.device)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=ctx.device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (2, W))
    ids = rast[0, ..., 3].cpu()
    # covered where x_ndc + y_ndc < 0 (strictly inside the lower-left half)
    xs = (2 * torch.arange(W, dtype=torch.float64) + 1) / W - 1
    for row, y in enumerate([-0.5, 0.5]):
        expect = (xs + y < -1e-9).float()
        clear = (xs + y).abs() > 1e-6
        assert torch.equal(ids[row][clear], expect[clear].float())
    assert ids[0].sum() > 9000


def test_triangle_limit_is_what_rast_can_hold():
    # 889,192,447 triangles (10 GB of indices) cannot be allocated here. The limit is the largest stored ID whose
    # encoding (tests/support/reference.py, written with integer arithmetic) is a finite float32 that decodes back: one
    # more is not. IDs past 2^24 are drawn in test_large_triangle_ids.py.
    limit = prerast._checks.MAX_TRIANGLES
    ids = np.array([limit, limit + 1])
    encoded = reference.encode_triangle_id(ids)
    assert np.isfinite(encoded[0]) and reference.decode_triangle_id(encoded[:1])[0] == limit
    assert not np.isfinite(encoded[1])


def test_tall_image(ctx):
    H = 16384
    pos = torch.tensor([[[-1.0, -1.0, 0.0, 1.0], [1.0, -1.0, 0.0, 1.0], [-1.0, 1.0, 0.0, 1.0]]], device=ctx.device)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=ctx.device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (H, 3))
    ids = rast[0, :, :, 3].cpu()
    ys = (2 * torch.arange(H, dtype=torch.float64) + 1) / H - 1
    expect = (ys[:, None] + torch.tensor([-2 / 3, 0.0, 2 / 3], dtype=torch.float64) < -1e-9).float()
    clear = (ys[:, None] + torch.tensor([-2 / 3, 0.0, 2 / 3], dtype=torch.float64)).abs() > 1e-6
    assert torch.equal(ids[clear], expect[clear])


def test_traceable_by_torch_compile(ctx):
    # aot_eager traces forward and backward through the ops' fake kernels without generating code.
    rng = np.random.default_rng(8)
    pos, tri = random_scene(rng, num_images=1, num_tris=10, perspective=True)
    p, t = to_torch(pos, tri, ctx.device)

    def f(p):
        rast, db = prerast.rasterize(ctx, p, t, (16, 16))
        return rast[..., :2].sum() + db.sum()

    p1 = p.clone().requires_grad_(True)
    f(p1).backward()
    p2 = p.clone().requires_grad_(True)
    torch.compile(f, backend="aot_eager")(p2).backward()
    torch.testing.assert_close(p2.grad, p1.grad)
