"""Fit a texture on a sphere to images of a textured target, sampling it through mipmaps.

The sphere is small on screen, so each pixel covers many texels: texture() picks mip levels from the uv
derivatives that interpolate computes (diff_attrs) and blends them ('linear-mipmap-linear'). Gradients reach
every texel through the mip chain.

    python examples/textured_sphere.py [--device cuda] [--steps 300] [--out textured_sphere.png]
"""

import math
import sys

import torch
from common import (
    Progress,
    context,
    homogeneous,
    parse_args,
    perspective,
    random_rotation,
    save_png,
    sphere,
    to_clip,
    translate,
)

import prerast


def target_texture(height=128, width=256):
    """Latitude/longitude checks in four colours over a smooth gradient."""
    v, u = torch.meshgrid(torch.linspace(0, 1, height), torch.linspace(0, 1, width), indexing="ij")
    check = ((u * 12).floor() + (v * 6).floor()) % 2
    base = torch.stack([u, 0.5 + 0.5 * torch.sin(2 * math.pi * v), 1 - u], -1)
    return (0.25 + 0.6 * check[..., None] * base)[None]


def render(ctx, mvp, vertices, uv, tri, tex, resolution, edges):
    pos = to_clip(mvp, vertices)
    rast, rast_db = prerast.rasterize(ctx, pos, tri, (resolution, resolution))
    texc, texd = prerast.interpolate(uv, rast, tri, rast_db, diff_attrs="all")
    colour = prerast.texture(tex, texc, texd, filter_mode="linear-mipmap-linear")
    colour = colour * (rast[..., 3:] > 0)  # background stays black
    return prerast.antialias(colour, rast, pos, tri, edges)


def main(argv=None):
    args = parse_args(
        "Fit a texture with mipmaps on a sphere.", argv, steps=300, resolution=96, out="textured_sphere.png"
    )
    ctx, dev = context(args.device), args.device
    vertices, uv, tri = (t.to(dev) for t in sphere())
    edges = prerast.antialias_construct_topology_hash(tri)  # built once, reused by every antialias call
    target_tex = target_texture().to(dev)
    fit_tex = torch.full_like(target_tex, 0.5).requires_grad_(True)
    opt = torch.optim.Adam([fit_tex], lr=0.03)
    camera = perspective(fovy=0.6) @ translate(0, 0, -4.0)
    progress, losses = Progress(args.steps, args.quiet), []
    for step in range(args.steps):
        views = torch.stack([camera @ homogeneous(random_rotation()) for _ in range(4)]).to(dev)
        with torch.no_grad():
            target = render(ctx, views, vertices, uv, tri, target_tex, args.resolution, edges)
        fit = render(ctx, views, vertices, uv, tri, fit_tex, args.resolution, edges)
        loss = torch.mean((fit - target) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            fit_tex.clamp_(0, 1)
        losses.append(loss.item())
        progress(step, losses[-1])
    view = (camera @ homogeneous(random_rotation()))[None].to(dev)
    with torch.no_grad():
        pair = torch.cat(
            [render(ctx, view, vertices, uv, tri, t, args.resolution, edges) for t in (target_tex, fit_tex)]
        )
    print(f"wrote {save_png(args.out, pair)} (target | fit)")
    return losses


if __name__ == "__main__":
    main(sys.argv[1:])
