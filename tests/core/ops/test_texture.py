"""prerast.texture on 2D textures: every filter and boundary mode against the NumPy model
(tests/support/reference_texture.py), mip chains against box averages, and gradients against finite differences."""

import numpy as np
import pytest
import torch

import prerast
import reference_texture as ref
from finite_diff import check_gradients

BOUNDARIES = ("wrap", "clamp", "zero")


def to_t(a, device):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device)


def footprints(rng, shape, tex_hw, lod_range):
    """uv_da [..., 4] whose LOD spreads over lod_range: random directions 2^lod level-0 texels long."""
    lod = rng.uniform(*lod_range, size=shape + (1,))
    da = rng.normal(size=shape + (4,)) * 2.0**lod / np.sqrt(2)
    return da / np.array([tex_hw[1], tex_hw[1], tex_hw[0], tex_hw[0]])


def random_case(rng, tex_shape, N=2, H=6, W=7, uv_range=(-1.5, 2.5), lod_range=(-1.5, 5.0)):
    tex = rng.normal(size=tex_shape)
    uv = rng.uniform(*uv_range, size=(N, H, W, 2))
    uv_da = footprints(rng, (N, H, W), tex_shape[1:3], lod_range)
    bias = rng.uniform(-1.0, 1.0, size=(N, H, W))
    return tex, uv, uv_da, bias


def as_float32(*arrays):
    return [None if a is None else np.asarray(a, np.float32) for a in arrays]


@pytest.mark.parametrize("filter_mode", ref.FILTERS)
@pytest.mark.parametrize("boundary_mode", BOUNDARIES)
@pytest.mark.parametrize("tex_shape", [(1, 16, 12, 3), (2, 7, 5, 2), (1, 1, 9, 1)])
def test_matches_reference(device, filter_mode, boundary_mode, tex_shape):
    rng = np.random.default_rng(sum(map(ord, filter_mode + boundary_mode)) + tex_shape[1])
    tex, uv, uv_da, bias = as_float32(*random_case(rng, tex_shape))
    out = prerast.texture(
        to_t(tex, device),
        to_t(uv, device),
        to_t(uv_da, device),
        to_t(bias, device),
        filter_mode=filter_mode,
        boundary_mode=boundary_mode,
    )
    expect = ref.texture(tex, uv, uv_da, bias, filter_mode=filter_mode, boundary_mode=boundary_mode)
    assert out.shape == expect.shape
    np.testing.assert_allclose(out.cpu().numpy(), expect, atol=2e-5)


@pytest.mark.parametrize("filter_mode", ["linear-mipmap-linear", "linear-mipmap-nearest"])
def test_lod_from_bias_alone_and_footprint_alone(device, filter_mode):
    rng = np.random.default_rng(3)
    tex, uv, uv_da, bias = as_float32(*random_case(rng, (1, 16, 16, 2)))
    bias = bias * 3 + 1.5  # LOD = bias alone spans the chain
    for da, b in ((uv_da, None), (None, bias)):
        out = prerast.texture(
            to_t(tex, device),
            to_t(uv, device),
            None if da is None else to_t(da, device),
            None if b is None else to_t(b, device),
            filter_mode=filter_mode,
        )
        expect = ref.texture(tex, uv, da, b, filter_mode=filter_mode)
        np.testing.assert_allclose(out.cpu().numpy(), expect, atol=2e-5)


@pytest.mark.parametrize("boundary_mode", BOUNDARIES)
@pytest.mark.parametrize("filter_mode", ["nearest", "linear"])
def test_uv_far_outside(device, boundary_mode, filter_mode):
    rng = np.random.default_rng(7)
    tex = rng.normal(size=(1, 8, 16, 3)).astype(np.float32)
    uv = (rng.choice([-1, 1], size=(1, 8, 8, 2)) * rng.uniform(3, 300, size=(1, 8, 8, 2))).astype(np.float32)
    out = prerast.texture(to_t(tex, device), to_t(uv, device), filter_mode=filter_mode, boundary_mode=boundary_mode)
    expect = ref.texture(tex, uv, filter_mode=filter_mode, boundary_mode=boundary_mode)
    np.testing.assert_allclose(out.cpu().numpy(), expect, atol=1e-4)
    if boundary_mode == "zero":
        assert (out == 0).all()


def test_texel_boundaries_and_centres(device):
    """Texel i covers [i/size, (i+1)/size) and its centre (i + 0.5)/size reads it alone."""
    W, H = 8, 4
    tex = torch.arange(W * H, dtype=torch.float32).reshape(1, H, W, 1)
    i = torch.arange(W, dtype=torch.float32)
    for offset, mode in ((0.0, "nearest"), (0.5, "nearest"), (0.5, "linear")):
        uv = torch.stack([(i + offset) / W, torch.full_like(i, 2.5 / H)], -1).reshape(1, 1, W, 2)
        out = prerast.texture(tex.to(device), uv.to(device), filter_mode=mode)
        assert torch.equal(out.cpu().flatten(), 2 * W + i), (offset, mode)
    edge = torch.tensor([[[[0.0, 0.5 / H]]]], device=device)  # left edge of row 0, between texels -1 and 0
    outs = {b: float(prerast.texture(tex.to(device), edge, boundary_mode=b)) for b in BOUNDARIES}
    assert outs == {"wrap": (0 + W - 1) / 2, "clamp": 0.0, "zero": 0.0}
    edge = torch.tensor([[[[1.0, 0.5 / H]]]], device=device)
    assert float(prerast.texture(tex.to(device), edge, boundary_mode="zero")) == (W - 1) / 2
    assert float(prerast.texture(tex.to(device), edge, boundary_mode="clamp")) == W - 1


@pytest.mark.parametrize("shape", [(1, 16, 16, 3), (2, 12, 20, 1), (1, 7, 5, 2), (1, 1, 9, 1), (1, 3, 3, 1)])
def test_mip_chain_matches_box_averages(device, shape):
    tex = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    chain = prerast.texture_construct_mip(to_t(tex, device))
    expect = ref.mip_chain(tex)
    assert chain.num_levels == len(expect) == int(np.log2(max(shape[1:3])))
    for level, e in zip(chain._levels, expect):
        assert level.shape == e.shape
        np.testing.assert_allclose(level.cpu().numpy(), e, atol=1e-6)


def test_odd_sides_fold_the_last_texel(device):
    row = torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0], device=device).reshape(1, 1, 5, 1)
    half, last = prerast.texture_construct_mip(row)._levels
    assert half.flatten().tolist() == pytest.approx([1.5, (4 + 8 + 16) / 3])
    assert last.flatten().tolist() == pytest.approx([(1.5 + (4 + 8 + 16) / 3) / 2])


def test_max_mip_level(device):
    rng = np.random.default_rng(5)
    tex, uv, uv_da, bias = as_float32(*random_case(rng, (1, 16, 16, 2)))
    T = lambda a: to_t(a, device)  # noqa: E731
    assert prerast.texture_construct_mip(T(tex), max_mip_level=2).num_levels == 2
    assert prerast.texture_construct_mip(T(tex), max_mip_level=0).num_levels == 0
    off = prerast.texture(T(tex), T(uv), T(uv_da), T(bias), max_mip_level=0)
    torch.testing.assert_close(off, prerast.texture(T(tex), T(uv), filter_mode="linear"))
    for m in (1, 2):
        out = prerast.texture(T(tex), T(uv), T(uv_da), T(bias), max_mip_level=m)
        np.testing.assert_allclose(out.cpu().numpy(), ref.texture(tex, uv, uv_da, bias, max_mip_level=m), atol=2e-5)
    chain = prerast.texture_construct_mip(T(tex))
    torch.testing.assert_close(
        prerast.texture(T(tex), T(uv), T(uv_da), T(bias), mip=chain, max_mip_level=1),
        prerast.texture(T(tex), T(uv), T(uv_da), T(bias), max_mip_level=1),
    )


def test_custom_chain(device):
    rng = np.random.default_rng(6)
    tex, uv, uv_da, bias = as_float32(*random_case(rng, (2, 8, 12, 3)))
    levels = [rng.normal(size=(2, 4, 6, 3)), rng.normal(size=(2, 2, 3, 3)), rng.normal(size=(2, 1, 1, 3))]
    levels = as_float32(*levels)
    for mode in ("linear-mipmap-linear", "linear-mipmap-nearest"):
        out = prerast.texture(
            to_t(tex, device),
            to_t(uv, device),
            to_t(uv_da, device),
            to_t(bias, device),
            mip=[to_t(m, device) for m in levels],
            filter_mode=mode,
        )
        expect = ref.texture(tex, uv, uv_da, bias, mip=levels, filter_mode=mode)
        np.testing.assert_allclose(out.cpu().numpy(), expect, atol=2e-5)
    short = prerast.texture(to_t(tex, device), to_t(uv, device), to_t(uv_da, device), mip=[to_t(levels[0], device)])
    np.testing.assert_allclose(short.cpu().numpy(), ref.texture(tex, uv, uv_da, mip=levels[:1]), atol=2e-5)


def test_prebuilt_chain_matches_internal_chain(device):
    rng = np.random.default_rng(8)
    tex, uv, uv_da, bias = (to_t(a, device) for a in random_case(rng, (1, 16, 8, 3)))
    grads = []
    for mip in (None, "built"):
        t = tex.clone().requires_grad_()
        chain = prerast.texture_construct_mip(t) if mip else None
        for _ in range(2):  # a chain is reusable across calls
            out = prerast.texture(t, uv, uv_da, bias, mip=chain)
            (out * torch.linspace(-1, 1, out.numel(), device=device).view(out.shape)).sum().backward()
        grads.append((out.detach(), t.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    torch.testing.assert_close(grads[0][1], grads[1][1])


def test_single_texture_serves_every_image(device):
    rng = np.random.default_rng(9)
    tex, uv, uv_da, bias = (to_t(a, device) for a in random_case(rng, (1, 8, 8, 2), N=3))
    one = tex.clone().requires_grad_()
    many = tex.expand(3, -1, -1, -1).clone().requires_grad_()
    outs = [prerast.texture(t, uv, uv_da, bias) for t in (one, many)]
    torch.testing.assert_close(outs[0], outs[1])
    for o in outs:
        o.square().sum().backward()
    torch.testing.assert_close(one.grad[0], many.grad.sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("filter_mode", ref.FILTERS)
@pytest.mark.parametrize("boundary_mode", BOUNDARIES)
def test_gradients(device, filter_mode, boundary_mode):
    rng = np.random.default_rng(11)
    tex, uv, uv_da, bias = random_case(rng, (1, 8, 6, 2), N=2, H=3, W=4, uv_range=(-0.6, 1.6), lod_range=(0.2, 2.8))
    inputs = {k: to_t(v, device) for k, v in dict(tex=tex, uv=uv, uv_da=uv_da, bias=bias).items()}
    wrt = {
        "nearest": ["tex"],
        "linear": ["tex", "uv"],
        "linear-mipmap-nearest": ["tex", "uv"],
        "linear-mipmap-linear": ["tex", "uv", "uv_da", "bias"],
    }[filter_mode]

    def fn(tex, uv, uv_da, bias):
        return prerast.texture(tex, uv, uv_da, bias, filter_mode=filter_mode, boundary_mode=boundary_mode)

    check_gradients(fn, inputs, wrt, eps={"tex": 1e-2, "uv": 1e-3, "uv_da": 2e-4, "bias": 1e-2})


@pytest.mark.parametrize("filter_mode", ["linear-mipmap-nearest", "linear-mipmap-linear"])
def test_gradients_custom_chain(device, filter_mode):
    rng = np.random.default_rng(12)
    tex, uv, uv_da, bias = random_case(rng, (1, 8, 8, 2), N=1, H=4, W=4, lod_range=(0.2, 2.8))
    inputs = {k: to_t(v, device) for k, v in dict(tex=tex, uv=uv, uv_da=uv_da, bias=bias).items()}
    inputs.update(
        m1=to_t(rng.normal(size=(1, 4, 4, 2)), device),
        m2=to_t(rng.normal(size=(1, 2, 2, 2)), device),
        m3=to_t(rng.normal(size=(1, 1, 1, 2)), device),
    )

    def fn(tex, uv, uv_da, bias, m1, m2, m3):
        return prerast.texture(tex, uv, uv_da, bias, mip=[m1, m2, m3], filter_mode=filter_mode)

    check_gradients(fn, inputs, ["tex", "m1", "m2", "m3"], eps=1e-2)


def test_which_inputs_get_gradients(device):
    rng = np.random.default_rng(13)
    base = [to_t(a, device) for a in random_case(rng, (1, 8, 8, 1), N=1, H=2, W=2)]
    expect = {
        "nearest": (True, False, False, False),
        "linear": (True, True, False, False),
        "linear-mipmap-nearest": (True, True, False, False),
        "linear-mipmap-linear": (True, True, True, True),
    }
    for mode, flags in expect.items():
        args = [a.clone().requires_grad_() for a in base]
        prerast.texture(*args, filter_mode=mode).sum().backward()
        assert tuple(a.grad is not None for a in args) == flags, mode


def test_non_finite_and_empty_inputs(device):
    tex = torch.ones(1, 4, 4, 2, device=device)
    # NaN, inf, and a finite u whose texel position overflows float32 read nothing.
    uv = torch.tensor([[[[float("nan"), 0.5], [0.5, float("inf")], [3e38, 0.5], [0.5, 0.5]]]], device=device)
    da = torch.full((1, 1, 4, 4), float("nan"), device=device)
    for mode in ref.FILTERS:
        for boundary in BOUNDARIES:
            out = prerast.texture(tex, uv, da, filter_mode=mode, boundary_mode=boundary)
            assert out[0, 0, :3].eq(0).all() and out[0, 0, 3].eq(1).all(), (mode, boundary)
    empty = prerast.texture(tex, torch.zeros(0, 3, 5, 2, device=device))
    assert empty.shape == (0, 3, 5, 2)
