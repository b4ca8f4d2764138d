"""Geometry real meshes contain: clipping against w = 0 and the near/far planes, degenerate triangles, non-finite
positions, and watertight coverage along shared edges."""

import numpy as np
import pytest
import torch

import prerast
import reference
from scenes import to_torch


def rast_np(ctx, pos, tri, res, ranges=None):
    p, t = to_torch(np.asarray(pos, np.float32), np.asarray(tri, np.int32), ctx.device)
    r, db = prerast.rasterize(ctx, p, t, res, ranges=ranges)
    return r.cpu().numpy(), db.cpu().numpy()


def compare(ctx, pos, tri, res):
    rast, db = rast_np(ctx, pos, tri, res)
    ref, ambiguous, near_cover = reference.rasterize(pos, tri, *res)
    ids = rast[..., 3].astype(np.int64)
    np.testing.assert_array_equal(ids[~ambiguous], ref[..., 3][~ambiguous])
    drawn = ~ambiguous & (ids > 0)
    np.testing.assert_allclose(rast[..., :3][drawn], ref[..., :3][drawn], atol=1e-3, rtol=1e-3)
    assert np.isfinite(rast).all() and np.isfinite(db).all()
    return rast


def perspective(points, near=0.1, far=10.0, f=1.0):
    """Camera-space points (x, y, z), looking down -z, to clip space."""
    p = np.asarray(points, np.float64)
    a, b = -(far + near) / (far - near), -2 * far * near / (far - near)
    return np.stack([f * p[..., 0], f * p[..., 1], a * p[..., 2] + b, -p[..., 2]], -1)


def test_triangle_crossing_behind_camera(ctx):
    # One vertex behind the eye (w < 0): only the part in front may be drawn, with correct barycentrics.
    pos = perspective([[[-1.0, -0.5, -2.0], [1.0, -0.5, -2.0], [0.0, -0.5, 3.0]]])
    rast = compare(ctx, pos, [[0, 1, 2]], (48, 48))
    assert (rast[..., 3] > 0).sum() > 50


def test_triangle_crossing_near_and_far_planes(ctx):
    pos = perspective([[[-2.0, -1.0, -0.05], [2.0, -1.0, -0.05], [0.0, 1.0, -30.0]]])
    rast = compare(ctx, pos, [[0, 1, 2]], (40, 40))
    zw = rast[..., 2][rast[..., 3] > 0]
    assert zw.min() >= -1 and zw.max() <= 1 and len(zw) > 20


def test_triangle_entirely_behind_camera_draws_nothing(ctx):
    pos = perspective([[[-1.0, -1.0, 2.0], [1.0, -1.0, 2.0], [0.0, 1.0, 2.0]]])
    rast, _ = rast_np(ctx, pos, [[0, 1, 2]], (16, 16))
    assert (rast == 0).all()


def test_ground_plane_to_horizon(ctx):
    # A huge ground quad from behind the camera to far beyond the far plane: no garbage, no NaN.
    pos = perspective([[[-50, -1, 5], [50, -1, 5], [50, -1, -500], [-50, -1, -500]]])
    compare(ctx, pos, [[0, 1, 2], [0, 2, 3]], (64, 64))


@pytest.mark.parametrize(
    "verts",
    [
        [[0.0, 0.0, 0, 1], [0.5, 0.5, 0, 1], [1.0, 1.0, 0, 1]],  # collinear
        [[0.1, 0.1, 0, 1], [0.1, 0.1, 0, 1], [0.7, -0.3, 0, 1]],  # repeated vertex
        [[0.2, 0.2, 0, 1], [0.2, 0.2, 0, 1], [0.2, 0.2, 0, 1]],  # a point
        [[0.0, 0.0, 0, 0], [0.5, 0.0, 0, 0], [0.0, 0.5, 0, 0]],  # all w = 0
    ],
)
def test_degenerate_triangles_draw_nothing(ctx, verts):
    rast, db = rast_np(ctx, [verts], [[0, 1, 2]], (32, 32))
    assert (rast == 0).all() and (db == 0).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e38])
def test_non_finite_positions_do_not_crash(ctx, bad):
    good = [[-0.8, -0.8, 0, 1], [0.8, -0.8, 0, 1], [0, 0.8, 0, 1]]
    broken = [[-0.5, -0.5, 0.5, 1], [bad, 0.5, 0.5, 1], [0.5, -0.5, 0.5, 1]]
    rast, db = rast_np(ctx, [good + broken], [[0, 1, 2], [3, 4, 5]], (24, 24))
    assert np.isfinite(rast).all() and np.isfinite(db).all()
    ids = set(np.unique(rast[..., 3]).tolist())
    assert 1.0 in ids
    if not np.isfinite(bad):
        assert 2.0 not in ids  # a triangle with a non-finite vertex is skipped


def fan_mesh(rng, n_ring, jitter, lattice=None):
    """A closed disc: triangles fanning around a centre, consistently wound, sharing every inner edge.
    With `lattice`, vertices snap to pixel centres so that many centres fall exactly on edges."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, n_ring))
    r = 0.8 + jitter * rng.uniform(-0.1, 0.1, n_ring)
    ring = np.stack([r * np.cos(angles), r * np.sin(angles)], -1)
    centre = rng.uniform(-0.1, 0.1, (1, 2))
    if lattice:
        snap = lambda p: (np.round((p + 1) * lattice / 2 - 0.5) + 0.5) * 2 / lattice - 1  # noqa: E731
        centre, ring = snap(centre), snap(ring)
        # Snapping can reorder or merge ring points; keep strictly increasing angles so the fan does not fold.
        ang = np.arctan2(ring[:, 1] - centre[0, 1], ring[:, 0] - centre[0, 0])
        ang, keep = np.unique(ang, return_index=True)
        ring = ring[keep]
    n_ring = len(ring)
    xy = np.concatenate([centre, ring])
    tri = np.array([[0, 1 + i, 1 + (i + 1) % n_ring] for i in range(n_ring)], np.int32)
    return xy, tri


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("lattice", [None, 32])
@pytest.mark.parametrize("w_mode", ["flat", "perspective"])
def test_shared_edges_cover_each_pixel_exactly_once(ctx, seed, lattice, w_mode):
    rng = np.random.default_rng(seed)
    xy, tri = fan_mesh(rng, 17, 1.0, lattice)
    w = np.ones(len(xy)) if w_mode == "flat" else rng.uniform(0.5, 2.0, len(xy))
    pos = np.concatenate([xy * w[:, None], np.zeros((len(xy), 1)), w[:, None]], -1)
    # Range mode with one triangle per image gives each triangle's coverage on its own.
    T = len(tri)
    ranges = torch.tensor([[t, 1] for t in range(T)], dtype=torch.int32)
    per_tri, _ = rast_np(ctx, pos, tri, (32, 32), ranges=ranges)
    count = (per_tri[..., 3] > 0).sum(0)
    assert count.max() == 1, "a pixel centre was claimed by two triangles of one surface"
    # Inside the polygon (away from its outer boundary, where the tie rule decides), every centre is covered.
    whole, _ = rast_np(ctx, pos[None], tri, (32, 32))
    ref, ambiguous, _ = reference.rasterize(pos[None], tri, 32, 32)
    inside_ring = (ref[0, ..., 3] > 0) & ~ambiguous[0]
    assert (count[inside_ring] == 1).all(), "a crack: a pixel inside the mesh was covered by no triangle"
    assert ((whole[0, ..., 3] > 0) == (count == 1)).all()
