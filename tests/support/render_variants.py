"""Render functions that use the public API's optional arguments in the combinations nvdiffrast programs use, for
the precompile tests: each must give the same images from a precompiled artifact as eagerly.

- plain: interpolate without rast_db or diff_attrs, a linear 2D lookup (no mip levels), antialias building its
  own topology hash;
- derivatives: interpolate with rast_db but no diff_attrs, and with diff_attrs; a lookup with mip levels given as
  a list; antialias with a topology hash made once (a module attribute);
- environment: a cube map looked up without mips (linear) and with them (built inside, and as a chain);
- range mode and depth peeling; a context made with output_db=False.
"""

import torch

import prerast
from render_scene import grid_scene


def context(device, output_db=True):
    return (
        prerast.RasterizeCpuContext(output_db=output_db)
        if device == "cpu"
        else prerast.RasterizeCudaContext(device, output_db=output_db)
    )


def box_levels(tex, count):
    """Mip levels 1..count of tex by 2 x 2 averages, as a user builds a list for texture(mip=...)."""
    levels, level = [], tex
    for _ in range(count):
        level = torch.nn.functional.avg_pool2d(level.permute(0, 3, 1, 2), 2).permute(0, 2, 3, 1).contiguous()
        levels.append(level)
    return levels


def inputs(device="cpu", seed=3):
    """(pos, tri, uv, tex, env, normals, ranges): grid_scene's, a [1, 6, 8, 8, 3] cube map, per-vertex directions
    and two ranges of the triangles for range mode (a CPU tensor, as rasterize wants it)."""
    pos, tri, uv, tex = grid_scene(n=4, seed=seed, device=device)
    g = torch.Generator().manual_seed(seed)
    env = torch.rand(1, 6, 8, 8, 3, generator=g).to(device)
    normals = torch.randn(1, pos.shape[1], 3, generator=g).to(device)
    ranges = torch.tensor([[0, 20], [12, 20]], dtype=torch.int32)
    return pos, tri, uv, tex, env, normals, ranges


def plain(ctx, pos, tri, uv, tex):
    rast, _ = prerast.rasterize(ctx, pos, tri, (20, 24))
    texc, _ = prerast.interpolate(uv, rast, tri)
    color = prerast.texture(tex, texc, filter_mode="linear")
    return prerast.antialias(color * (rast[..., 3:] > 0), rast, pos, tri)


def derivatives(ctx, pos, tri, uv, tex, topology_hash):
    rast, rast_db = prerast.rasterize(ctx, pos, tri, (20, 24))
    texc, none_da = prerast.interpolate(uv, rast, tri, rast_db)
    _, texd = prerast.interpolate(uv, rast, tri, rast_db, diff_attrs=[0, 1])
    color = prerast.texture(tex, texc, texd, mip=box_levels(tex, 3), filter_mode="linear-mipmap-linear")
    return prerast.antialias(color, rast, pos, tri, topology_hash=topology_hash), none_da


def environment(ctx, pos, tri, env, normals):
    rast, rast_db = prerast.rasterize(ctx, pos, tri, (20, 24))
    d, dd = prerast.interpolate(normals, rast, tri, rast_db, diff_attrs="all")
    sharp = prerast.texture(env, d, boundary_mode="cube")  # 'auto' without derivatives: linear, no levels
    blurred = prerast.texture(env, d, dd, boundary_mode="cube", max_mip_level=2)
    chain = prerast.texture(
        env,
        d,
        dd,
        mip=prerast.texture_construct_mip(env, cube_mode=True),
        filter_mode="linear-mipmap-nearest",
        boundary_mode="cube",
    )
    return sharp, blurred, chain


def ranges_and_layers(ctx, lean_ctx, pos, tri, uv, ranges):
    rast, _ = prerast.rasterize(ctx, pos[0], tri, (20, 24), ranges=ranges)
    ranged, _ = prerast.interpolate(uv[0], rast, tri)
    # A second copy of the grid behind the first (z/w larger by 0.3): the second layer shows it.
    behind_pos = torch.cat([pos, pos + 0.3 * pos[..., 3:] * torch.tensor([0.0, 0.0, 1.0, 0.0], device=pos.device)], 1)
    both = torch.cat([tri, tri + pos.shape[1]])
    with prerast.DepthPeeler(ctx, behind_pos, both, (20, 24)) as peeler:
        peeler.rasterize_next_layer()
        second, _ = peeler.rasterize_next_layer()
    behind, _ = prerast.interpolate(torch.cat([uv, 2 - uv], 1), second, both)
    rast, empty_db = prerast.rasterize(lean_ctx, pos, tri, (20, 24))
    lean, _ = prerast.interpolate(uv, rast, tri, empty_db)
    return ranged, behind, lean, empty_db


class Variants(torch.nn.Module):
    """Every function above in one module (one artifact to compile); the topology hash is made once, here."""

    def __init__(self, device="cpu", tri=None):
        super().__init__()
        self.ctx, self.lean_ctx = context(device), context(device, output_db=False)
        self.topology_hash = prerast.antialias_construct_topology_hash(inputs(device)[1] if tri is None else tri)

    def forward(self, pos, tri, uv, tex, env, normals, ranges):
        return (
            plain(self.ctx, pos, tri, uv, tex),
            *derivatives(self.ctx, pos, tri, uv, tex, self.topology_hash),
            *environment(self.ctx, pos, tri, env, normals),
            *ranges_and_layers(self.ctx, self.lean_ctx, pos, tri, uv, ranges),
        )


def training_step(ctx, pos, tri, uv, tex, env, normals, ranges):
    """A loss over the combinations without derivatives (the ones whose list arguments are empty), for the
    training route: gradients reach pos, tex, env and normals."""
    rast, _ = prerast.rasterize(ctx, pos, tri, (18, 22))
    texc, _ = prerast.interpolate(uv, rast, tri)
    d, _ = prerast.interpolate(normals, rast, tri)
    color = prerast.texture(tex, texc, filter_mode="linear") * prerast.texture(env, d, boundary_mode="cube")
    color = prerast.antialias(color * (rast[..., 3:] > 0), rast, pos, tri)
    rast_r, _ = prerast.rasterize(ctx, pos[0], tri, (18, 22), ranges=ranges)
    ranged, _ = prerast.interpolate(uv[0], rast_r, tri)
    return color, (color**2).mean() + ranged.mean()
