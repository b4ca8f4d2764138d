"""Bad input to texture and texture_construct_mip gets a clear Python exception, never a crash."""

import pytest
import torch

import prerast


def inputs(N=1, H=2, W=3, size=8, C=3):
    return torch.rand(1, size, size, C), torch.rand(N, H, W, 2)


def test_not_tensors():
    tex, uv = inputs()
    with pytest.raises(TypeError, match="tex must be a torch.Tensor"):
        prerast.texture(tex.numpy(), uv)
    with pytest.raises(TypeError, match="uv_da must be a torch.Tensor"):
        prerast.texture(tex, uv, uv_da=[0.1])
    with pytest.raises(TypeError, match="mip must be None, the result of texture_construct_mip, or a list"):
        prerast.texture(tex, uv, torch.rand(1, 2, 3, 4), mip=tex)
    with pytest.raises(TypeError, match=r"mip\[1\] must be a torch.Tensor"):
        prerast.texture(tex, uv, torch.rand(1, 2, 3, 4), mip=[torch.rand(1, 4, 4, 3), None])


def test_wrong_dtypes():
    tex, uv = inputs()
    with pytest.raises(TypeError, match="tex must be float32, got torch.float64"):
        prerast.texture(tex.double(), uv)
    with pytest.raises(TypeError, match="uv must be Float, got Double"):
        prerast.texture(tex, uv.double())
    with pytest.raises(TypeError, match="mip_level_bias must be Float, got Half"):
        prerast.texture(tex, uv, mip_level_bias=torch.zeros(1, 2, 3, dtype=torch.half))
    with pytest.raises(TypeError, match="tex must be float32"):
        prerast.texture_construct_mip(tex.double())


def test_wrong_shapes():
    tex, uv = inputs()
    with pytest.raises(ValueError, match=r"a 2D texture must have shape \[N, H, W, C\], got \[8, 8, 3\]"):
        prerast.texture(tex[0], uv)
    with pytest.raises(ValueError, match="uv must have size 2 in dimension 3"):
        prerast.texture(tex, torch.rand(1, 2, 3, 3))
    with pytest.raises(ValueError, match="uv must have 4 dimensions"):
        prerast.texture(tex, uv[0])
    with pytest.raises(ValueError, match=r"uv_da must have shape \[1, 2, 3, 4\], got \[1, 2, 3, 2\]"):
        prerast.texture(tex, uv, uv_da=torch.rand(1, 2, 3, 2))
    with pytest.raises(ValueError, match=r"mip_level_bias must have shape \[1, 2, 3\], got \[1, 3, 2\]"):
        prerast.texture(tex, uv, mip_level_bias=torch.rand(1, 3, 2))
    with pytest.raises(ValueError, match="tex holds 2 textures but uv has 3 images"):
        prerast.texture(torch.rand(2, 4, 4, 1), torch.rand(3, 2, 2, 2))
    with pytest.raises(ValueError, match="at least one texture, texel and channel"):
        prerast.texture(torch.rand(1, 0, 4, 1), uv)
    with pytest.raises(ValueError, match="at least one texture, texel and channel"):
        prerast.texture(torch.rand(1, 4, 4, 0), uv)


def test_bad_modes_and_levels():
    tex, uv = inputs()
    with pytest.raises(ValueError, match="filter_mode must be one of 'nearest', 'linear'.*got 'bilinear'"):
        prerast.texture(tex, uv, filter_mode="bilinear")
    with pytest.raises(ValueError, match="boundary_mode must be one of 'wrap'.*got 'mirror'"):
        prerast.texture(tex, uv, boundary_mode="mirror")
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_mip_level must be None or an integer >= 0"):
            prerast.texture(tex, uv, filter_mode="linear-mipmap-linear", max_mip_level=bad)
        with pytest.raises(ValueError, match="max_mip_level must be None or an integer >= 0"):
            prerast.texture_construct_mip(tex, max_mip_level=bad)


def test_cube_needs_cube_boundary_and_only_cube():
    cube = torch.rand(1, 6, 4, 4, 3)
    d = torch.rand(1, 2, 2, 3)
    with pytest.raises(ValueError, match="needs boundary_mode='cube'"):
        prerast.texture(cube, d)
    with pytest.raises(ValueError, match=r"a cube map must have shape \[N, 6, S, S, C\], got \[1, 4, 4, 3\]"):
        prerast.texture(torch.rand(1, 4, 4, 3), d, boundary_mode="cube")
    with pytest.raises(ValueError, match=r"a cube map must have shape \[N, 6, S, S, C\], got \[1, 5, 4, 4, 3\]"):
        prerast.texture(torch.rand(1, 5, 4, 4, 3), d, boundary_mode="cube")
    with pytest.raises(ValueError, match=r"got \[1, 6, 4, 3, 3\]"):
        prerast.texture(torch.rand(1, 6, 4, 3, 3), d, boundary_mode="cube")
    with pytest.raises(ValueError, match="uv must have size 3 in dimension 3"):
        prerast.texture(cube, torch.rand(1, 2, 2, 2), boundary_mode="cube")
    with pytest.raises(ValueError, match=r"uv_da must have shape \[1, 2, 2, 6\]"):
        prerast.texture(cube, d, uv_da=torch.rand(1, 2, 2, 4), boundary_mode="cube")
    with pytest.raises(ValueError, match="cube_mode=True"):
        prerast.texture_construct_mip(cube)
    with pytest.raises(ValueError, match=r"a cube map must have shape"):
        prerast.texture_construct_mip(torch.rand(1, 4, 4, 3), cube_mode=True)


def test_mip_chain_mismatch():
    tex, uv = inputs()
    da = torch.rand(1, 2, 3, 4)
    other = prerast.texture_construct_mip(torch.rand(1, 16, 8, 3))
    with pytest.raises(ValueError, match=r"mip was built for a texture of shape \[1, 16, 8, 3\]"):
        prerast.texture(tex, uv, da, mip=other)
    cube_chain = prerast.texture_construct_mip(torch.rand(1, 6, 4, 4, 3), cube_mode=True)
    with pytest.raises(ValueError, match="mip was built for"):
        prerast.texture(
            torch.rand(1, 6, 4, 4, 3),
            torch.rand(1, 2, 3, 3),
            torch.rand(1, 2, 3, 6),
            mip=other,
            boundary_mode="cube",
            filter_mode="linear-mipmap-linear",
        )
    with pytest.raises(ValueError, match="mip was built for"):
        prerast.texture(torch.rand(1, 4, 4, 3), uv, da, mip=cube_chain)
    with pytest.raises(
        ValueError, match=r"mip\[1\] \(mip level 2\) must have shape \[1, 2, 2, 3\], got \[1, 2, 3, 3\]"
    ):
        prerast.texture(tex, uv, da, mip=[torch.rand(1, 4, 4, 3), torch.rand(1, 2, 3, 3)])
    with pytest.raises(ValueError, match="mip has 4 levels but a texture of 8 x 8 texels has only 3"):
        prerast.texture(
            tex,
            uv,
            da,
            mip=[torch.rand(1, 4, 4, 3), torch.rand(1, 2, 2, 3), torch.rand(1, 1, 1, 3), torch.rand(1, 1, 1, 3)],
        )
    with pytest.raises(TypeError, match=r"mip\[0\] must be Float"):
        prerast.texture(tex, uv, da, mip=[torch.rand(1, 4, 4, 3).double()])


def test_size_limit():
    wide = torch.zeros(1, 1, 65537, 1)
    with pytest.raises(ValueError, match=r"tex of shape \[1, 1, 65537, 1\] exceeds the limit of 65536 texels per side"):
        prerast.texture(wide, torch.zeros(1, 1, 1, 2))
    with pytest.raises(ValueError, match="exceeds the limit of 65536 texels per side"):
        prerast.texture_construct_mip(wide)


def test_devices_must_match():
    tex, uv = inputs()
    with pytest.raises(ValueError, match="every tensor must be on"):
        prerast.texture(tex, uv.to("meta"))
    with pytest.raises(ValueError, match="every tensor must be on"):
        prerast.texture(tex, uv, mip_level_bias=torch.zeros(1, 2, 3, device="meta"))


def test_non_contiguous_inputs_are_accepted():
    tex, uv = inputs()
    wide = torch.rand(1, 2, 3, 4)
    out = prerast.texture(tex, wide[..., 1:3])
    torch.testing.assert_close(out, prerast.texture(tex, wide[..., 1:3].contiguous()))


@pytest.mark.parametrize("mode", ["linear-mipmap-linear", "linear-mipmap-nearest"])
def test_mipmap_filter_without_uv_da_or_bias_is_refused(mode):
    """Nothing would choose a level: nvdiffrast refuses the lookup, and so does prerast (it used to read level 0),
    also with a chain or a list of levels given. max_mip_level=0 (no mipmapping) and 'auto' (-> 'linear') stay
    valid, and a bias alone selects levels."""
    tex, uv = inputs()
    cube, d = torch.rand(1, 6, 4, 4, 3), torch.randn(1, 2, 3, 3)
    for kwargs in (
        {},
        {"mip": prerast.texture_construct_mip(tex)},
        {"mip": [torch.rand(1, 4, 4, 3)]},
        {"max_mip_level": 2},
    ):
        with pytest.raises(ValueError, match=f"filter_mode='{mode}' needs uv_da .* or mip_level_bias"):
            prerast.texture(tex, uv, filter_mode=mode, **kwargs)
    with pytest.raises(ValueError, match="needs uv_da"):
        prerast.texture(cube, d, filter_mode=mode, boundary_mode="cube")
    linear = prerast.texture(tex, uv, filter_mode="linear")
    assert torch.equal(prerast.texture(tex, uv, filter_mode=mode, max_mip_level=0), linear)
    assert torch.equal(prerast.texture(tex, uv), linear)
    coarse = prerast.texture(tex, uv, mip_level_bias=torch.full((1, 2, 3), 3.0), filter_mode=mode)
    mean = tex.mean(dim=(1, 2))  # level 3 of an 8 x 8 texture is its mean texel
    torch.testing.assert_close(coarse, mean.view(1, 1, 1, 3).expand(1, 2, 3, 3))
