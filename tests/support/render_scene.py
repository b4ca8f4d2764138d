"""A small textured scene and the render function that the compile and precompile tests run through every op:
rasterize -> interpolate (with derivatives) -> mipmapped texture -> antialias."""

import numpy as np
import torch

import prerast


def grid_scene(n=6, images=1, seed=0, device="cpu"):
    """(pos [N, V, 4], tri [T, 3], uv [N, V, 2], tex [1, 16, 16, 3]): a jittered perspective grid of n x n quads,
    V = (n + 1) ** 2, whose shared vertices give antialias inner edges to skip and silhouettes to blend."""
    rng = np.random.default_rng(seed)
    u = np.linspace(-0.9, 0.9, n + 1)
    gx, gy = np.meshgrid(u, u)
    tri = [[i * (n + 1) + j, i * (n + 1) + j + 1, (i + 1) * (n + 1) + j + 1] for i in range(n) for j in range(n)]
    tri += [[i * (n + 1) + j, (i + 1) * (n + 1) + j + 1, (i + 1) * (n + 1) + j] for i in range(n) for j in range(n)]
    xy = np.stack([gx, gy], -1).reshape(1, -1, 2) + rng.uniform(-0.15, 0.15, (images, (n + 1) ** 2, 2))
    w = rng.uniform(0.8, 1.6, xy.shape[:2] + (1,))
    z = rng.uniform(-0.5, 0.5, xy.shape[:2] + (1,))
    pos = np.concatenate([xy * w, z * w, w], -1)
    uv = (xy + 1.0) * 1.5  # wraps around the texture once and a half
    tex = rng.uniform(0, 1, (1, 16, 16, 3))
    as_float = lambda a: torch.tensor(a, dtype=torch.float32, device=device)  # noqa: E731
    return as_float(pos), torch.tensor(tri, dtype=torch.int32, device=device), as_float(uv), as_float(tex)


def render(glctx, pos, tri, uv, tex, target):
    """The antialiased, textured image at target's resolution, and its squared error against target."""
    rast, rast_db = prerast.rasterize(glctx, pos, tri, target.shape[1:3])
    texc, texd = prerast.interpolate(uv, rast, tri, rast_db=rast_db, diff_attrs="all")
    color = prerast.texture(tex, texc, texd, filter_mode="linear-mipmap-linear", max_mip_level=3)
    color = torch.where(rast[..., 3:] > 0, color, torch.zeros_like(color))
    color = prerast.antialias(color, rast, pos, tri)
    return color, ((color - target) ** 2).mean()


class Renderer(torch.nn.Module):
    """render() as a module, for export: the context is an attribute, the tensors are inputs."""

    def __init__(self, device="cpu"):
        super().__init__()
        self.glctx = prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext(device)

    def forward(self, pos, tri, uv, tex, target):
        return render(self.glctx, pos, tri, uv, tex, target)
