"""The CPU rasterizer is bit-for-bit the arithmetic of rasterize.h (modelled in tests/support/exact_raster.py).

Scenes that stress what a faster rasterizer could get subtly wrong: many tiny triangles, meshes with shared
edges, vertices exactly on pixel centres (edges through centres, decided by the double-precision path and the
tie rules), huge triangles crossing w = 0 and the clip planes, and depth ties; at resolutions that are and are
not multiples of the tile size, and with one thread or several.
"""

import os
import sys

import numpy as np
import pytest
import torch

import prerast

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
import exact_raster  # noqa: E402


def soup(g, num_tris, size, batch=2):
    centre = torch.rand(batch, num_tris, 1, 2, generator=g) * 2.2 - 1.1
    corner = centre + (torch.rand(batch, num_tris, 3, 2, generator=g) - 0.5) * 2 * size
    z = torch.rand(batch, num_tris, 3, 1, generator=g) * 1.8 - 0.9
    w = 1.0 + torch.rand(batch, num_tris, 3, 1, generator=g)
    pos = torch.cat([corner * w, z * w, w], -1).reshape(batch, 3 * num_tris, 4)
    return pos, torch.arange(3 * num_tris, dtype=torch.int32).reshape(num_tris, 3)


def grid_mesh(coords_x, coords_y):
    """Two triangles per cell of the grid, both diagonals (overlapping) so that edges are shared."""
    yy, xx = torch.meshgrid(coords_y, coords_x, indexing="ij")
    mx, my = len(coords_x), len(coords_y)
    idx = torch.arange(mx * my).reshape(my, mx)
    a, b = idx[:-1, :-1].reshape(-1), idx[:-1, 1:].reshape(-1)
    c, d = idx[1:, :-1].reshape(-1), idx[1:, 1:].reshape(-1)
    tri = torch.cat([torch.stack(t, 1) for t in [(a, b, d), (a, d, c), (b, c, a), (b, d, c)]]).int()
    return torch.stack([xx, yy], -1).reshape(-1, 2), tri


def scene(name, H, W, seed=0):
    g = torch.Generator().manual_seed(seed)
    if name == "tiny":
        return soup(g, 3000, 0.02)
    if name == "small":
        return soup(g, 400, 0.2)
    if name == "huge_and_w_crossing":
        pos = (torch.rand(2, 60, 4, generator=g) - 0.5) * 6
        pos[..., 3] = torch.rand(2, 60, generator=g) * 3 - 1  # w in [-1, 2]
        return pos, torch.arange(60, dtype=torch.int32).reshape(20, 3)
    if name == "depth_ties":
        pos, tri = soup(g, 300, 0.4)
        pos[..., 2] = 0.0
        return pos, tri
    if name == "shared_edges":
        xy, tri = grid_mesh(torch.linspace(-1.1, 1.1, 9), torch.linspace(-1.1, 1.1, 7))
        xy = xy + (torch.rand(xy.shape, generator=g) - 0.5) * 0.1
        w = 1 + torch.rand(len(xy), 1, generator=g)
        z = torch.rand(len(xy), 1, generator=g) - 0.5
        return torch.cat([xy * w, z * w, w], -1)[None].contiguous(), tri
    if name == "vertices_on_pixel_centres":
        cx = (2 * torch.arange(1, W, 5) + 1).float() / W - 1
        cy = (2 * torch.arange(1, H, 4) + 1).float() / H - 1
        xy, tri = grid_mesh(cx, cy)
        return torch.cat([xy, torch.zeros(len(xy), 2)], -1)[None].index_fill(2, torch.tensor([3]), 1.0), tri
    raise ValueError(name)


SCENES = ["tiny", "small", "huge_and_w_crossing", "depth_ties", "shared_edges", "vertices_on_pixel_centres"]


@pytest.mark.parametrize("name", SCENES)
@pytest.mark.parametrize("res", [(48, 40), (64, 64), (37, 81)])
def test_bit_identical_to_the_exact_model(name, res):
    H, W = res
    pos, tri = scene(name, H, W)
    rast, db = prerast.rasterize(prerast.RasterizeCpuContext(), pos, tri, (H, W))
    ref, ref_db = exact_raster.rasterize(pos.numpy(), tri.numpy(), H, W)
    assert (ref[..., 3] > 0).any()
    got, got_db = rast.numpy(), db.numpy()
    bad = got.view(np.uint32) != ref.view(np.uint32)
    assert not bad.any(), f"{bad.any(-1).sum()} pixels differ in rast, first at {np.argwhere(bad)[0]}"
    bad = got_db.view(np.uint32) != ref_db.view(np.uint32)
    assert not bad.any(), f"{bad.any(-1).sum()} pixels differ in rast_db, first at {np.argwhere(bad)[0]}"


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_thread_count_does_not_change_bits(threads):
    pos, tri = scene("tiny", 64, 64, seed=1)
    ctx = prerast.RasterizeCpuContext()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        want = prerast.rasterize(ctx, pos, tri, (200, 136))
        torch.set_num_threads(threads)
        got = prerast.rasterize(ctx, pos, tri, (200, 136))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(got, want):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))
