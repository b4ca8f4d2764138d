"""Arguments accepted in the forms nvdiffrast programs pass them: ranges ignored in instanced mode, max_mip_level
as any integral number, diff_attrs as a sequence/array/tensor with negative indices, pos_gradient_boost as a 0-d
tensor or numpy scalar, and textures up to 65536 texels per side."""

import numpy as np
import pytest
import torch

import prerast
import reference_texture as ref
from conftest import assert_same_sums


def scene(device):
    pos = torch.tensor(
        [[[-0.8, -0.8, 0.2, 1.0], [0.9, -0.6, 0.2, 1.0], [-0.5, 0.9, 0.2, 1.0], [0.9, 0.9, 0.5, 1.0]]], device=device
    )
    tri = torch.tensor([[0, 1, 2], [1, 3, 2]], dtype=torch.int32, device=device)
    return pos, tri


def test_ranges_are_ignored_in_instanced_mode(ctx, device):
    pos, tri = scene(device)
    want = prerast.rasterize(ctx, pos, tri, (16, 16))
    for ranges in (torch.tensor([[1, 1]], dtype=torch.int32), torch.tensor([[0, 99]], dtype=torch.int32)):
        got = prerast.rasterize(ctx, pos, tri, (16, 16), ranges=ranges)
        assert all(torch.equal(a, b) for a, b in zip(want, got))
        with prerast.DepthPeeler(ctx, pos, tri, (16, 16), ranges=ranges) as peeler:
            assert torch.equal(peeler.rasterize_next_layer()[0], want[0])


@pytest.mark.parametrize("level", [2, np.int64(2), np.int32(2), 2.0, np.float32(2.0), torch.tensor(2)])
def test_max_mip_level_any_integral_number(device, level):
    rng = np.random.default_rng(0)
    tex = rng.normal(size=(1, 16, 16, 2)).astype(np.float32)
    uv = rng.uniform(0, 1, size=(1, 4, 4, 2)).astype(np.float32)
    da = (rng.normal(size=(1, 4, 4, 4)) * 0.3).astype(np.float32)
    T = lambda a: torch.from_numpy(a).to(device)
    out = prerast.texture(T(tex), T(uv), T(da), max_mip_level=level)
    np.testing.assert_allclose(out.cpu().numpy(), ref.texture(tex, uv, da, max_mip_level=2), atol=2e-5)
    assert prerast.texture_construct_mip(T(tex), max_mip_level=level).num_levels == 2


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", np.bool_(True), float("nan")])
def test_max_mip_level_rejects_non_integers(bad):
    with pytest.raises(ValueError, match="max_mip_level must be None or an integer >= 0"):
        prerast.texture_construct_mip(torch.rand(1, 4, 4, 1), max_mip_level=bad)


@pytest.mark.parametrize(
    "diff_attrs",
    [[0, 2], (0, -1), [0, np.int64(-1)], np.array([0, 2]), torch.tensor([0, -1]), range(0, 3, 2), [torch.tensor(0), 2]],
)
def test_diff_attrs_forms_and_negative_indices(ctx, device, diff_attrs):
    pos, tri = scene(device)
    attr = torch.arange(12.0, device=device).reshape(1, 4, 3) ** 2
    rast, db = prerast.rasterize(ctx, pos, tri, (16, 16))
    out, out_da = prerast.interpolate(attr, rast, tri, rast_db=db, diff_attrs=diff_attrs)
    _, every = prerast.interpolate(attr, rast, tri, rast_db=db, diff_attrs="all")
    assert torch.equal(out_da, every[..., [0, 1, 4, 5]])  # (dA/dX, dA/dY) of attributes 0 and 2


def test_diff_attrs_bad_forms(ctx, device):
    pos, tri = scene(device)
    attr = torch.rand(1, 4, 3, device=device)
    rast, db = prerast.rasterize(ctx, pos, tri, (8, 8))
    for bad, err in (
        ([3], IndexError),
        ([-4], IndexError),
        ([0.0], TypeError),
        ([True], TypeError),
        (torch.tensor([0.5]), TypeError),
        (np.zeros((1, 1), int), ValueError),
        (torch.tensor(0), TypeError),
        (np.int64(0), TypeError),
    ):
        with pytest.raises(err, match="diff_attrs"):
            prerast.interpolate(attr, rast, tri, rast_db=db, diff_attrs=bad)


@pytest.mark.parametrize("boost", [2.0, 2, np.float32(2.0), np.float64(2.0), torch.tensor(2.0), np.array(2.0)])
def test_pos_gradient_boost_scalar_forms(ctx, device, boost):
    pos, tri = scene(device)
    pos = pos.clone().requires_grad_(True)
    rast, _ = prerast.rasterize(ctx, pos.detach(), tri, (16, 16))
    color = (rast[..., 3:] > 0).float()

    def grad_with(b):
        pos.grad = None
        prerast.antialias(color, rast, pos, tri, pos_gradient_boost=b).sum().backward()
        return pos.grad.clone()

    assert_same_sums(grad_with(boost), grad_with(2.0))
    assert grad_with(boost).abs().sum() > 0
    with pytest.raises(TypeError, match="pos_gradient_boost must be a number"):
        grad_with(torch.tensor([2.0, 3.0]))


def test_texture_65536_texels_wide(device):
    """A 1 x 65536 strip (the side limit) and a 65536 x 3 column: texel centres read their texel exactly, the
    mip chain has all 17 levels, and mipmapped lookups match the reference."""
    rng = np.random.default_rng(4)
    for shape in ((1, 1, 65536, 1), (1, 65536, 3, 1)):
        tex = rng.normal(size=shape).astype(np.float32)
        h, w = shape[1:3]
        iy, ix = rng.integers(0, h, 64), rng.integers(0, w, 64)
        uv = np.stack([(ix + 0.5) / w, (iy + 0.5) / h], -1).reshape(1, 1, 64, 2).astype(np.float32)
        t = torch.from_numpy(tex).to(device)
        out = prerast.texture(t, torch.from_numpy(uv).to(device), filter_mode="nearest")
        np.testing.assert_array_equal(out.cpu().numpy().ravel(), tex[0, iy, ix, 0])
        assert prerast.texture_construct_mip(t).num_levels == 16
        da = rng.normal(size=(1, 1, 64, 4)) * 2.0 ** rng.uniform(0, 14, size=(1, 1, 64, 1)) / 65536
        da = da.astype(np.float32)
        got = prerast.texture(t, torch.from_numpy(uv).to(device), torch.from_numpy(da).to(device))
        np.testing.assert_allclose(got.cpu().numpy(), ref.texture(tex, uv, da), atol=1e-4)
