"""End to end: learn a texture through rasterize -> interpolate -> texture so that renders of a textured,
perspective-tilted quad match renders of the same quad with a target texture."""

import math

import pytest
import torch

import prerast
from conftest import make_ctx


def tilted_quads():
    """Two views of a quad with uv at its corners, tilted away from the camera (so that the far half is minified
    and the LOD varies over the image): instanced clip-space positions [2, 4, 4], tri [2, 3], uv [4, 2]."""
    views = []
    for near_w, far_w in ((1.2, 3.5), (3.0, 1.1)):
        corners = [(-0.9, -0.9, near_w), (0.9, -0.9, near_w), (0.9, 0.9, far_w), (-0.9, 0.9, far_w)]
        views.append([[x * w, y * w, 0.5 * w, w] for x, y, w in corners])
    pos = torch.tensor(views)
    tri = torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32)
    uv = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    return pos, tri, uv


def target_texture(size=32):
    ys, xs = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    r = 0.5 + 0.4 * torch.sin(2 * math.pi * 2 * xs)
    g = 0.5 + 0.4 * torch.cos(2 * math.pi * 3 * ys)
    b = (((xs * 4).floor() + (ys * 4).floor()) % 2) * 0.8 + 0.1
    return torch.stack([r, g, b], -1)[None]


@pytest.mark.parametrize("filter_mode", ["linear", "linear-mipmap-linear"])
def test_fit_texture_through_the_pipeline(device, filter_mode):
    ctx = make_ctx(device)
    pos, tri, uv_attr = (t.to(device) for t in tilted_quads())
    rast, rast_db = prerast.rasterize(ctx, pos, tri, (40, 40))
    uv, uv_da = prerast.interpolate(uv_attr, rast, tri, rast_db=rast_db, diff_attrs="all")
    covered = (rast[..., 3:] > 0).float()
    assert covered.mean() > 0.3
    if filter_mode != "linear":
        # The far half of each quad is minified several times, so the LOD spans several levels.
        lod = 0.5 * torch.log2((uv_da[..., 0::2] * 32).square().sum(-1).clamp_min(1e-12))
        assert lod[covered[..., 0] > 0].max() > 1.0

    def render(tex):
        return prerast.texture(tex, uv, uv_da, filter_mode=filter_mode, boundary_mode="clamp") * covered

    target = render(target_texture().to(device))
    tex = torch.full((1, 32, 32, 3), 0.5, device=device, requires_grad=True)
    opt = torch.optim.Adam([tex], lr=0.05)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = (render(tex) - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 1000, (losses[0], losses[-1])
