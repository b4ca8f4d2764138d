"""A deferred PBR pass with an environment cube map, written as environment-lit material programs use nvdiffrast:
two depth layers peeled with DepthPeeler (a translucent front surface over an opaque one), a G-buffer per layer
(uv, normal and roughness with their screen derivatives), an albedo texture with its mip stack given as a list, a
diffuse environment lookup without mips, and a specular one from a prefiltered stack of cube levels (a list)
selected by roughness through mip_level_bias; the layers composited front over back.

The image is checked against a NumPy model built from the reference rasterizer (each layer from its own surface),
reference_texture's lookups and the same shading, and the gradients of every input against finite differences."""

import numpy as np
import pytest
import torch

import prerast
import reference
import reference_texture
from conftest import make_ctx
from finite_diff import check_gradients

H, W = 18, 22
ALPHA = 0.6  # the front layer's opacity


def quads():
    """Two perspective quads (vertices 0-3 in front, 4-7 behind), overlapping in the middle of the image."""
    xy = np.array(
        [[-0.9, -0.7], [0.35, -0.8], [0.3, 0.75], [-0.85, 0.7], [-0.3, -0.9], [0.9, -0.75], [0.85, 0.9], [-0.25, 0.8]]
    )
    zw = np.array([0.1, 0.15, 0.2, 0.12, 0.5, 0.55, 0.6, 0.52])
    w = np.array([1.0, 1.3, 1.6, 1.1, 1.2, 0.9, 1.4, 1.0])
    pos = np.c_[xy * w[:, None], zw * w, w][None]
    tri = np.array([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]], np.int32)
    return pos, tri


def box_levels(tex, faces=False):
    """Levels 1.. of tex by 2 x 2 averages down to one texel, as a list (cube faces halved separately)."""
    levels, level = [], tex
    while level.shape[-2] > 1:
        flat = level.reshape(-1, *level.shape[-3:]).permute(0, 3, 1, 2)
        half = torch.nn.functional.avg_pool2d(flat, 2).permute(0, 2, 3, 1)
        level = half.reshape(*tex.shape[:-3], *half.shape[1:]).contiguous()
        levels.append(level)
    return levels


def inputs(device):
    g = torch.Generator().manual_seed(11)
    albedo = torch.rand(1, 16, 16, 3, generator=g)
    env = torch.rand(1, 6, 8, 8, 3, generator=g)
    as_dev = lambda t: t.to(device).contiguous()  # noqa: E731
    return {
        "uv": as_dev(torch.rand(8, 2, generator=g) * 1.5),
        "normal": as_dev(torch.randn(8, 3, generator=g) + torch.tensor([0.0, 0.0, 1.5])),
        "rough": as_dev(torch.rand(8, 1, generator=g)),
        "albedo": as_dev(albedo),
        "albedo_mips": [as_dev(m) for m in box_levels(albedo)],
        "irradiance": as_dev(torch.rand(1, 6, 4, 4, 3, generator=g)),
        "env": as_dev(env),
        "env_mips": [as_dev(m) for m in box_levels(env)],
    }


def shade(rast, rast_db, tri, uv, normal, rough, albedo, albedo_mips, irradiance, env, env_mips):
    texc, texd = prerast.interpolate(uv, rast, tri, rast_db, diff_attrs="all")
    n, _ = prerast.interpolate(normal, rast, tri)
    r, _ = prerast.interpolate(rough, rast, tri)
    base = prerast.texture(albedo, texc, texd, mip=albedo_mips, filter_mode="linear-mipmap-linear")
    diffuse = prerast.texture(irradiance, n, filter_mode="linear", boundary_mode="cube")
    specular = prerast.texture(
        env, n, mip=env_mips, mip_level_bias=3 * r[..., 0], filter_mode="linear-mipmap-linear", boundary_mode="cube"
    )
    covered = rast[..., 3:] > 0
    return (base * diffuse + 0.3 * specular) * covered, covered


def deferred(ctx, pos, tri, **material):
    with prerast.DepthPeeler(ctx, pos, tri, (H, W)) as peeler:
        (front, in_front), (back, _) = [shade(*peeler.rasterize_next_layer(), tri, **material) for _ in range(2)]
    return ALPHA * front + (1 - ALPHA * in_front.float()) * back


def numpy_deferred(pos, tri, m):
    """The same pass from the reference rasterizer: layer 1 is the nearer quad, layer 2 the other where both
    cover; attributes and derivatives from reference barycentrics; lookups by reference_texture."""
    a = {
        k: (
            np.asarray(v.cpu(), np.float64)
            if isinstance(v, torch.Tensor)
            else [np.asarray(x.cpu(), np.float64) for x in v]
        )
        for k, v in m.items()
    }
    per_quad = [reference.rasterize(pos, tri[q : q + 2], H, W) for q in (0, 2)]
    rasts = [r[0].copy() for r in per_quad]
    for q, r in zip((0, 2), rasts):
        r[..., 3] = np.where(r[..., 3] > 0, r[..., 3] + q, 0)  # IDs into the whole tri
    ambiguous = per_quad[0][1] | per_quad[1][1]
    cover = [r[..., 3] > 0 for r in rasts]
    front = np.where(cover[0][..., None], rasts[0], rasts[1])
    back = np.where((cover[0] & cover[1])[..., None], rasts[1], 0)

    def layer(rast):
        db = reference.rast_db(pos, tri, rast, H, W)
        ids = rast[..., 3].astype(np.int64)
        corners = tri[np.maximum(ids - 1, 0)]
        lam = np.stack([rast[..., 0], rast[..., 1], 1 - rast[..., 0] - rast[..., 1]], -1)

        def attr(x):
            return (lam[..., None] * x[corners]).sum(-2) * (ids > 0)[..., None]

        def attr_da(x):
            d = x[corners[..., 0]] - x[corners[..., 2]], x[corners[..., 1]] - x[corners[..., 2]]
            dX = db[..., 0:1] * d[0] + db[..., 2:3] * d[1]
            dY = db[..., 1:2] * d[0] + db[..., 3:4] * d[1]
            return np.stack([dX, dY], -1).reshape(*dX.shape[:-1], -1) * (ids > 0)[..., None]

        T = reference_texture.texture
        base = T(a["albedo"], attr(a["uv"]), attr_da(a["uv"]), mip=a["albedo_mips"], filter_mode="linear-mipmap-linear")
        n = attr(a["normal"])
        diffuse = T(a["irradiance"], n, filter_mode="linear", boundary_mode="cube")
        specular = T(
            a["env"],
            n,
            bias=3 * attr(a["rough"])[..., 0],
            mip=a["env_mips"],
            filter_mode="linear-mipmap-linear",
            boundary_mode="cube",
        )
        return (base * diffuse + 0.3 * specular) * (ids > 0)[..., None]

    with np.errstate(invalid="ignore", divide="ignore"):  # background pixels look up the zero direction
        f, b = layer(front), layer(back)
    out = ALPHA * f + (1 - ALPHA * (front[..., 3:] > 0)) * b
    return out, ambiguous, cover


def test_deferred_pass_matches_the_numpy_model(device):
    pos, tri = quads()
    material = inputs(device)
    got = (
        deferred(
            make_ctx(device),
            torch.tensor(pos, dtype=torch.float32, device=device),
            torch.tensor(tri, device=device),
            **material,
        )[0]
        .cpu()
        .double()
        .numpy()
    )
    want, ambiguous, cover = numpy_deferred(pos, tri, material)
    want = want[0]
    ok = ~ambiguous[0]
    both = cover[0][0] & cover[1][0]
    assert both.sum() > 40 and (cover[0][0] ^ cover[1][0]).sum() > 80  # two layers, and one-layer pixels
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=2e-4)
    assert (got[~cover[0][0] & ~cover[1][0]] == 0).all()


@pytest.mark.parametrize("wrt", [["albedo", "irradiance"], ["env", "albedo_mips"], ["uv", "normal", "rough"]])
def test_gradients_match_finite_differences(device, wrt):
    pos, tri = quads()
    ctx = make_ctx(device)
    pos, tri = torch.tensor(pos, dtype=torch.float32, device=device), torch.tensor(tri, device=device)
    material = inputs(device)
    if "albedo_mips" in wrt:  # check_gradients moves one tensor: the finest listed level stands for the list
        first, *rest = material.pop("albedo_mips")
        material["albedo_mips"] = first
        fn = lambda albedo_mips, **m: deferred(ctx, pos, tri, albedo_mips=[albedo_mips, *rest], **m)  # noqa: E731
    else:
        fn = lambda **m: deferred(ctx, pos, tri, **m)  # noqa: E731
    eps = {
        "albedo": 1e-2,
        "irradiance": 1e-2,
        "env": 1e-2,
        "albedo_mips": 1e-2,
        "uv": 5e-5,
        "normal": 5e-5,
        "rough": 5e-5,
    }
    # The attributes move the lookups of many pixels at once, so texel centres and mip level boundaries (kinks of
    # the lookups) lie within eps of some of them more often than the one-sided test notices; each adds an error of
    # its own size to the difference, however small the gradient: looser tolerances there (the gradients reach
    # about 10). The textures enter linearly.
    rtol, atol = (5e-2, 0.1) if "uv" in wrt else (2e-2, 2e-3)
    check_gradients(fn, material, wrt, eps, rtol=rtol, atol=atol, max_elements=24, min_checked=0.5)
