"""Mip level of detail: the major axis of the footprint ellipse (the larger eigenvalue of [[A, C], [C, B]]),
its gradient to uv_da and the bias, floor(lod) for 'linear-mipmap-nearest', and finite results for degenerate
footprints. A chain whose level k holds the constant k makes the output the LOD itself (or the level read)."""

import numpy as np
import torch

import prerast
import reference_texture as ref

SIZE = 64  # level 0 is SIZE x SIZE, then 32, 16, ..., 1: levels 0..6
TOP = 6


def level_chain(device, cube=False, C=1):
    """Level 0 and the mip chain, level k filled with k."""
    faces = (6,) if cube else ()
    sizes = [SIZE >> k for k in range(TOP + 1)]
    levels = [torch.full((1,) + faces + (s, s, C), float(k), device=device) for k, s in enumerate(sizes)]
    return levels[0], levels[1:]


def lod_of(device, uv_da, bias=None, filter_mode="linear-mipmap-linear", uv=None):
    """prerast's LOD for each footprint row of uv_da [P, 4] (2D texture)."""
    tex, mip = level_chain(device)
    P = len(uv_da)
    uv = torch.full((1, 1, P, 2), 0.3, device=device) if uv is None else uv
    da = torch.as_tensor(uv_da, dtype=torch.float32, device=device).reshape(1, 1, P, 4)
    b = None if bias is None else torch.as_tensor(bias, dtype=torch.float32, device=device).reshape(1, 1, P)
    return prerast.texture(tex, uv, da, b, mip=mip, filter_mode=filter_mode)[0, 0, :, 0]


def ref_lod(uv_da, bias=None):
    uv = np.full((len(uv_da), 2), 0.3)
    return ref.level_of_detail((1, SIZE, SIZE, 1), uv, np.asarray(uv_da, np.float64), bias, TOP + 1, cube=False)


def test_skewed_footprint_uses_the_major_axis(device):
    t = 4.0 / SIZE  # 4 texels
    # d/dX = d/dY = (4, 0) texels: a 4*sqrt(2) long segment -> 2.5, where the longer side alone would give 2.0.
    rows = [[t, t, 0, 0], [t, 0, 0, t], [t, -t, 0, 0], [t, t, t, -t], [2 * t, t, 0, 0]]
    out = lod_of(device, rows).cpu().numpy()
    np.testing.assert_allclose(out[:4], [2.5, 2.0, 2.5, 2.5], atol=1e-5)
    np.testing.assert_allclose(out, ref_lod(rows), atol=1e-5)


def test_random_footprints_and_bias_match_reference(device):
    rng = np.random.default_rng(5)
    da = rng.normal(size=(200, 4)) * 2.0 ** rng.uniform(-2, 7, size=(200, 1)) / SIZE
    bias = rng.uniform(-1.5, 1.5, size=200)
    np.testing.assert_allclose(lod_of(device, da, bias).cpu().numpy(), ref_lod(da, bias), atol=2e-5)


def test_mipmap_nearest_reads_level_floor_lod(device):
    t = 1.0 / SIZE
    lods = np.array([0.0, 0.4, 0.6, 1.5, 2.9, 3.0, 5.99, 9.0])
    rows = [[t * 2.0**l, 0, 0, 0] for l in lods]
    out = lod_of(device, rows, filter_mode="linear-mipmap-nearest").cpu().numpy()
    np.testing.assert_allclose(out, np.minimum(np.floor(lods + 1e-6), TOP), atol=1e-5)


def test_gradient_to_uv_da_and_bias_matches_reference(device):
    rng = np.random.default_rng(9)
    P = 64
    da = rng.normal(size=(P, 4)) * 2.0 ** rng.uniform(1, 4.5, size=(P, 1)) / SIZE
    da[:4] = np.array([[1, 1, 0, 0], [1, -1, 2, 0.5], [0, 1, 1, 0], [3, 0, 0, 1]]) * 8 / SIZE  # skewed
    bias = rng.uniform(-0.5, 0.5, size=P)
    da_t = torch.tensor(da, dtype=torch.float32, device=device, requires_grad=True)
    bias_t = torch.tensor(bias, dtype=torch.float32, device=device, requires_grad=True)
    lod = lod_of(device, da_t, bias_t)
    lod.sum().backward()
    # Central differences of the float64 reference, row by row.
    expect = np.zeros_like(da)
    for k in range(4):
        step = np.zeros_like(da)
        step[:, k] = 1e-6 * np.abs(da).max(1)
        expect[:, k] = (ref_lod(da + step, bias) - ref_lod(da - step, bias)) / (2 * step[:, k])
    inside = (ref_lod(da, bias) > 0.05) & (ref_lod(da, bias) < TOP - 0.05)
    assert inside.sum() > P // 2
    g = da_t.grad.cpu().numpy()
    np.testing.assert_allclose(g[inside], expect[inside], rtol=1e-3, atol=1e-3 * SIZE)
    np.testing.assert_array_equal(bias_t.grad.cpu().numpy()[inside], 1.0)


def test_gradient_at_a_circular_footprint_is_finite(device):
    t = 4.0 / SIZE  # equal, orthogonal axes: the two eigenvalues meet
    da = torch.tensor([[t, 0, 0, t]], device=device, requires_grad=True)
    lod = lod_of(device, da)
    lod.sum().backward()
    assert torch.isfinite(da.grad).all()
    # The mean of the one-sided derivatives: growing either axis alone raises the LOD at half the full rate.
    np.testing.assert_allclose(da.grad.cpu().numpy(), [[0.5 / (np.log(2) * t), 0, 0, 0.5 / (np.log(2) * t)]], rtol=1e-5)


def test_degenerate_footprints_stay_finite(device):
    t = 1.0 / SIZE
    rows = [
        [0, 0, 0, 0],  # zero footprint: LOD -inf, level 0 whatever the bias
        [1e30, 0, 0, 1e30],  # too large for float32 squares: the top level
        [float("nan"), 0, 0, 0],  # no footprint: level 0
        [float("inf"), 0, 0, 0],
        [1e-18 * t, 0, 0, 0],  # tiny: LOD about -60, lifted by the bias
        [1e-21 * t, 1e-21 * t, 0, 0],  # squares below float32's normal range
        [t, t, t, t],
    ]  # rank one
    bias = [3.0, 0, 0, 0, 62.0, 70.0, 0]
    da = torch.tensor(rows, dtype=torch.float32, device=device, requires_grad=True)
    b = torch.tensor(bias, dtype=torch.float32, device=device, requires_grad=True)
    lod = lod_of(device, da, b)
    (lod * torch.arange(1.0, 8.0, device=device)).sum().backward()
    out = lod.detach().cpu().numpy()
    assert np.isfinite(out).all() and np.isfinite(da.grad.cpu().numpy()).all()
    assert np.isfinite(b.grad.cpu().numpy()).all()
    np.testing.assert_allclose(out[[0, 1, 2, 3, 6]], [0, TOP, 0, TOP, 1.0], atol=1e-5)
    expect_tiny = 0.5 * np.log2(np.float64(np.float32(1e-18 * t)) ** 2 * SIZE**2) + 62
    assert abs(out[4] - expect_tiny) < 1e-3
    expect_tinier = 0.5 * np.log2(2 * np.float64(np.float32(1e-21 * t)) ** 2 * SIZE**2) + 70
    assert 0 < expect_tinier < TOP and abs(out[5] - expect_tinier) < 1e-3
    # The bias moves the LOD one for one wherever it stays inside the chain; below 2^-64 texels the footprint
    # gets no gradient (it would be about 1/footprint).
    np.testing.assert_array_equal(b.grad.cpu().numpy(), [0, 0, 0, 0, 5, 6, 7])
    assert (da.grad[4, 0] > 1e15) and (da.grad[5] == 0).all()


def test_cube_lod_uses_the_major_axis_on_the_face(device):
    rng = np.random.default_rng(11)
    P = 120
    d = rng.normal(size=(P, 3))
    q = np.abs(d).max(-1, keepdims=True)
    dd = rng.normal(size=(P, 6)) * 2.0 ** rng.uniform(-1, 7, size=(P, 1)) * 2 * q / SIZE
    dd[:3] = 0
    d[:3] = [[1, 0.2, -0.1], [0.1, -1, 0.3], [0.2, 0.1, 1]]
    dd[0, [4, 5]] = 8 / SIZE  # z moves by the same amount along X and Y: s on +x moves 4 texels each way
    dd[1, [0, 1]] = 8 / SIZE
    dd[2, [0, 2]] = [8 / SIZE, 8 / SIZE]
    bias = rng.uniform(-0.5, 0.5, size=P)
    tex, mip = level_chain(device, cube=True)
    T = lambda a: torch.tensor(a, dtype=torch.float32, device=device).reshape((1, 1, P, -1))
    out = (
        prerast.texture(
            tex,
            T(d),
            T(dd),
            T(bias).reshape(1, 1, P),
            mip=mip,
            boundary_mode="cube",
            filter_mode="linear-mipmap-linear",
        )[0, 0, :, 0]
        .cpu()
        .numpy()
    )
    expect = ref.level_of_detail((1, 6, SIZE, SIZE, 1), d, dd, bias, TOP + 1, cube=True)
    np.testing.assert_allclose(out, expect, atol=3e-5)
    # Row 0: both screen axes move s by -4 texels on face +x (|x| = 1): 0.5 log2(32) = 2.5 before the bias.
    assert abs(out[0] - (2.5 + bias[0])) < 1e-4


def test_cube_gradient_to_uv_da_matches_reference(device):
    rng = np.random.default_rng(12)
    P = 48
    d = rng.normal(size=(P, 3))
    q = np.abs(d).max(-1, keepdims=True)
    dd = rng.normal(size=(P, 6)) * 2.0 ** rng.uniform(1.5, 4.5, size=(P, 1)) * 2 * q / SIZE
    tex, mip = level_chain(device, cube=True)
    dd_t = torch.tensor(dd, dtype=torch.float32, device=device, requires_grad=True)
    d_t = torch.tensor(d, dtype=torch.float32, device=device)
    out = prerast.texture(
        tex,
        d_t.reshape(1, 1, P, 3),
        dd_t.reshape(1, 1, P, 6),
        mip=mip,
        boundary_mode="cube",
        filter_mode="linear-mipmap-linear",
    )
    out.sum().backward()
    lod = lambda x: ref.level_of_detail((1, 6, SIZE, SIZE, 1), d, x, None, TOP + 1, cube=True)
    expect = np.zeros_like(dd)
    for k in range(6):
        step = np.zeros_like(dd)
        step[:, k] = 1e-6 * np.abs(dd).max(1)
        expect[:, k] = (lod(dd + step) - lod(dd - step)) / (2 * step[:, k])
    inside = (lod(dd) > 0.05) & (lod(dd) < TOP - 0.05)
    assert inside.sum() > P // 2
    scale = np.abs(expect[inside]).max()
    np.testing.assert_allclose(dd_t.grad.cpu().numpy()[inside], expect[inside], rtol=1e-3, atol=1e-4 * scale)
