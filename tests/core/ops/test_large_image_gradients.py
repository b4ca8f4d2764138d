"""Gradients summed over 8192 x 8192 pixels (67 million contributions into one triangle's three vertices) match a
float64 sum of the same contributions to 1e-5 relative: the scatter-adds accumulate in double and round once."""

import numpy as np
import pytest
import torch

import prerast
from conftest import requires_cuda
from reference import pixel_centers

pytestmark = pytest.mark.slow  # images of 8192 x 8192: over a minute on 2 cores

SIZE = 8192
# One triangle covering most of the screen (w = 1, so the barycentrics are affine in the pixel centre).
POS = np.array([[-0.95, -0.9, 0.2, 1.0], [0.97, -0.85, -0.1, 1.0], [0.05, 0.93, 0.4, 1.0]], np.float32)
TRI = torch.tensor([[0, 1, 2]], dtype=torch.int32)


@pytest.fixture(scope="module")
def upstream():
    """A positive upstream gradient per pixel (no cancellation in the sums), in [0.5, 1.5)."""
    rng = np.random.default_rng(3)
    return 0.5 + rng.random((SIZE, SIZE), dtype=np.float32)


def relative_error(got, want):
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def test_interpolate_attribute_gradient(ctx, device, upstream):
    pos = torch.from_numpy(POS)[None].to(device)
    rast, _ = prerast.rasterize(ctx, pos, TRI.to(device), (SIZE, SIZE))
    attr = torch.zeros(1, 3, 1, device=device, requires_grad=True)
    out, _ = prerast.interpolate(attr, rast, TRI.to(device))
    g = torch.from_numpy(upstream)[None, :, :, None].to(device)
    (grad,) = torch.autograd.grad(out, attr, g)
    r = rast[0].cpu().numpy()
    del rast, out
    hit = r[..., 3] > 0
    u, v = r[..., 0][hit], r[..., 1][hit]
    gh = upstream[hit]
    w = (np.float32(1.0) - u) - v  # the contributions in float32, as the op forms them
    want = np.array(
        [np.sum(gh * u, dtype=np.float64), np.sum(gh * v, dtype=np.float64), np.sum(gh * w, dtype=np.float64)]
    )
    assert hit.sum() > 0.4 * SIZE * SIZE
    assert relative_error(grad[0, :, 0].double().cpu().numpy(), want) < 1e-5


def test_rasterize_position_gradient(ctx, device, upstream):
    # Loss = sum of g * u over the pixels. With w = 1, u = (K q)[0] for K = M^-1, M's columns the vertices'
    # (x, y, 1) and q = (px, py, 1); dL/dM = -K^T (sum_pixels gl q^T) K^T with gl_j = g ((j == 0) - u): linear in
    # the per-pixel terms, so the float64 reference needs only sums over pixels.
    pos = torch.from_numpy(POS)[None].to(device).requires_grad_(True)
    rast, _ = prerast.rasterize(ctx, pos, TRI.to(device), (SIZE, SIZE))
    g = torch.zeros(1, SIZE, SIZE, 4, device=device)
    g[..., 0] = torch.from_numpy(upstream).to(device)
    (grad,) = torch.autograd.grad(rast, pos, g)
    r = rast[0].detach().cpu().numpy()
    del rast, g
    hit = r[..., 3] > 0
    px, py = pixel_centers(SIZE, SIZE)
    u, gh, px, py = r[..., 0][hit].astype(np.float64), upstream[hit].astype(np.float64), px[hit], py[hit]
    G = np.zeros((3, 3))
    for j in range(3):
        gl = gh * ((j == 0) - u)
        G[j] = [np.sum(gl * px), np.sum(gl * py), np.sum(gl)]
    M = np.stack([POS[:, 0], POS[:, 1], POS[:, 3]]).astype(np.float64)  # rows x, y, w; columns the vertices
    K = np.linalg.inv(M)
    dM = -K.T @ (G @ K.T)  # dM[r, j]: row r (x, y, w) of vertex j
    want = np.zeros((3, 4))
    want[:, 0], want[:, 1], want[:, 3] = dM[0], dM[1], dM[2]
    got = grad[0].double().cpu().numpy()
    assert relative_error(got, want) < 1e-5


def test_texture_gradient_of_a_magnified_texture(device, upstream):
    # A 2 x 2 texture stretched over 8192^2 pixels: each texel gets the bilinear weight of every pixel.
    lin = ((np.arange(SIZE, dtype=np.float64) + 0.5) / SIZE * 0.5 + 0.25).astype(np.float32)  # in [0.25, 0.75]
    u, v = np.meshgrid(lin, lin)
    uv = torch.from_numpy(np.stack([u, v], -1))[None].to(device)
    tex = torch.rand(1, 2, 2, 1, device=device, requires_grad=True)
    out = prerast.texture(tex, uv, filter_mode="linear", boundary_mode="clamp")
    (grad,) = torch.autograd.grad(out, tex, torch.from_numpy(upstream)[None, :, :, None].to(device))
    del out, uv
    fx, fy = u.astype(np.float64) * 2 - 0.5, v.astype(np.float64) * 2 - 0.5  # texel coordinates in [0, 1]
    g = upstream.astype(np.float64)
    want = np.array(
        [[np.sum(g * (1 - fx) * (1 - fy)), np.sum(g * fx * (1 - fy))], [np.sum(g * (1 - fx) * fy), np.sum(g * fx * fy)]]
    )
    assert relative_error(grad[0, :, :, 0].double().cpu().numpy(), want) < 1e-5


@requires_cuda
def test_texture_gradient_too_large_for_a_double_copy():
    # 4100 x 8192 x 4 texels (past 2^27, the largest gradient CUDA copies into double) under 11600^2 pixels: as
    # many contributions as texels, so double sums would be chosen; the gradient falls back to float sums instead of
    # a 1 GiB copy. Bilinear weights with wrap addressing sum to 1: each channel's gradient sums to grad_out's.
    tex = torch.zeros(1, 4100, 8192, 4, device="cuda", requires_grad=True)
    uv = torch.rand(1, 11600, 11600, 2, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    out = prerast.texture(tex, uv, filter_mode="linear", boundary_mode="wrap")
    del uv
    g = torch.rand_like(out)
    (grad,) = torch.autograd.grad(out, tex, g)
    del out
    want = g.double().sum((0, 1, 2))
    got = grad.double().sum((0, 1, 2))
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
