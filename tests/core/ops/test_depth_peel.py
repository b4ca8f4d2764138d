"""DepthPeeler: successive layers in depth order, matching the reference's sorted depths; context reservation."""

import warnings

import numpy as np
import pytest
import torch

import prerast
import reference
from scenes import random_scene, to_torch


def reference_layers(pos, tri, H, W, num_layers):
    """Per pixel, the triangles covering it sorted by (z/w, id): layer k is the k-th of them."""
    N = pos.shape[0]
    frags = [[[] for _ in range(H * W)] for _ in range(N)]
    for n in range(N):
        for t in range(len(tri)):
            single, _, _ = reference.rasterize(pos[n : n + 1], tri[t : t + 1], H, W)
            covered = np.nonzero(single[0, ..., 3].ravel() > 0)[0]
            for k in covered:
                frags[n][k].append((single[0].reshape(-1, 4)[k, 2], t + 1))
    layers = np.zeros((num_layers, N, H * W))
    for n in range(N):
        for k in range(H * W):
            for L, (_, tid) in enumerate(sorted(frags[n][k])[:num_layers]):
                layers[L, n, k] = tid
    return layers.reshape(num_layers, N, H, W)


def test_layers_follow_reference_depth_order(ctx):
    rng = np.random.default_rng(4)
    pos, tri = random_scene(rng, num_images=2, num_tris=12, perspective=True, spread=2.0)
    H, W = 24, 24
    p, t = to_torch(pos, tri, ctx.device)
    ref_ids = reference_layers(pos, tri, H, W, 4)
    _, ambiguous, _ = reference.rasterize(pos, tri, H, W)
    clear = ~ambiguous
    with prerast.DepthPeeler(ctx, p, t, (H, W)) as peeler:
        first, first_db = peeler.rasterize_next_layer()
        direct, direct_db = prerast.rasterize(
            prerast.RasterizeCpuContext() if ctx.device.type == "cpu" else prerast.RasterizeCudaContext(ctx.device),
            p,
            t,
            (H, W),
        )
        assert torch.equal(first, direct) and torch.equal(first_db, direct_db)
        layers = [first] + [peeler.rasterize_next_layer()[0] for _ in range(3)]
    assert ref_ids[1].astype(bool).sum() > 50, "scene has too little overlap to test peeling"
    for L, rast in enumerate(layers):
        ids = rast[..., 3].cpu().numpy()
        np.testing.assert_array_equal(ids[clear], ref_ids[L][clear])
        if L:
            prev = layers[L - 1]
            both = ids > 0
            assert (rast[..., 2].cpu().numpy()[both] >= prev[..., 2].cpu().numpy()[both]).all()


def test_peeling_ends_in_empty_layers(ctx):
    pos = torch.tensor([[[-1.0, -1.0, 0.0, 1.0], [3.0, -1.0, 0.0, 1.0], [-1.0, 3.0, 0.0, 1.0]]], device=ctx.device)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=ctx.device)
    with prerast.DepthPeeler(ctx, pos, tri, (8, 8)) as peeler:
        a, _ = peeler.rasterize_next_layer()
        b, b_db = peeler.rasterize_next_layer()
        c, _ = peeler.rasterize_next_layer()
    assert (a[..., 3] == 1).all() and (b == 0).all() and (b_db == 0).all() and (c == 0).all()


def test_peel_gradients_flow(ctx):
    pos = torch.tensor(
        [
            [
                [-0.9, -0.9, 0.5, 1.0],
                [0.9, -0.9, 0.5, 1.0],
                [0.0, 0.9, 0.5, 1.0],
                [-0.9, 0.9, 0.0, 1.0],
                [0.9, 0.9, 0.0, 1.0],
                [0.0, -0.9, 0.0, 1.0],
            ]
        ],
        device=ctx.device,
    )
    tri = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32, device=ctx.device)
    p = pos.clone().requires_grad_(True)
    with prerast.DepthPeeler(ctx, p, tri, (16, 16)) as peeler:
        peeler.rasterize_next_layer()
        second, _ = peeler.rasterize_next_layer()
    assert set(second[..., 3].unique().tolist()) <= {0.0, 1.0}  # the farther triangle is the second layer
    second[..., :2].sum().backward()
    assert p.grad[0, :3].abs().sum() > 0 and (p.grad[0, 3:] == 0).all()


def test_context_is_reserved_while_peeling(ctx):
    pos = torch.zeros(1, 3, 4, device=ctx.device)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=ctx.device)
    with prerast.DepthPeeler(ctx, pos, tri, (4, 4)):
        with pytest.raises(RuntimeError, match="reserved by an active DepthPeeler"):
            prerast.rasterize(ctx, pos, tri, (4, 4))
        with pytest.raises(RuntimeError, match="reserved"):
            with prerast.DepthPeeler(ctx, pos, tri, (4, 4)):
                pass
    prerast.rasterize(ctx, pos, tri, (4, 4))  # released again
    peeler = prerast.DepthPeeler(ctx, pos, tri, (4, 4))
    with pytest.raises(RuntimeError, match="inside a 'with' block"):
        peeler.rasterize_next_layer()


def test_gl_context_is_a_deprecated_alias():
    if not torch.cuda.is_available():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(RuntimeError, match="CUDA is not available"):
                prerast.RasterizeGLContext()
        assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    else:
        with pytest.warns(DeprecationWarning):
            ctx = prerast.RasterizeGLContext()
        assert isinstance(ctx, prerast.RasterizeCudaContext)
    assert issubclass(prerast.RasterizeGLContext, prerast.RasterizeCudaContext)
