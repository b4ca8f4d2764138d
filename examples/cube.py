"""Fit a cube's vertex colours and positions to images of a target cube seen from random directions.

The target and the fit are rendered alike (rasterize, interpolate, antialias); the loss is the mean squared
difference of the images. Antialiasing is what lets the silhouette pull the vertex positions.

    python examples/cube.py [--device cuda] [--steps 400] [--out cube.png]
"""

import sys

import torch
from common import (
    Progress,
    context,
    cube,
    homogeneous,
    parse_args,
    perspective,
    random_rotation,
    save_png,
    to_clip,
    translate,
)

import prerast


def render(ctx, mvp, vertices, colours, tri, resolution, edges):
    pos = to_clip(mvp, vertices)
    rast, _ = prerast.rasterize(ctx, pos, tri, (resolution, resolution))
    image, _ = prerast.interpolate(colours, rast, tri)
    return prerast.antialias(image, rast, pos, tri, edges)


def main(argv=None):
    args = parse_args("Fit a cube's vertex colours and positions.", argv, steps=400, resolution=96, out="cube.png")
    ctx, dev = context(args.device), args.device
    vertices, tri = cube()
    tri = tri.to(dev)
    edges = prerast.antialias_construct_topology_hash(tri)  # built once, reused by every antialias call
    target_v, target_c = vertices.to(dev), torch.rand(8, 3).to(dev)
    fit_v = (vertices + 0.15 * torch.randn(8, 3)).to(dev).requires_grad_(True)
    fit_c = torch.full((8, 3), 0.5, device=dev, requires_grad=True)
    opt = torch.optim.Adam([{"params": [fit_v], "lr": 0.01}, {"params": [fit_c], "lr": 0.03}])
    camera = perspective() @ translate(0, 0, -3.0)
    progress, losses = Progress(args.steps, args.quiet), []
    for step in range(args.steps):
        views = torch.stack([camera @ homogeneous(random_rotation()) for _ in range(4)]).to(dev)
        with torch.no_grad():
            target = render(ctx, views, target_v, target_c, tri, args.resolution, edges)
        loss = torch.mean((render(ctx, views, fit_v, fit_c, tri, args.resolution, edges) - target) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        progress(step, losses[-1])
    view = (camera @ homogeneous(random_rotation()))[None].to(dev)
    with torch.no_grad():
        pair = torch.cat(
            [
                render(ctx, view, target_v, target_c, tri, args.resolution, edges),
                render(ctx, view, fit_v, fit_c, tri, args.resolution, edges),
            ]
        )
    print(f"wrote {save_png(args.out, pair)} (target | fit)")
    return losses


if __name__ == "__main__":
    main(sys.argv[1:])
