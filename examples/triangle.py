"""Render one triangle with a colour at each corner, antialias its edges and write it to a PNG.

python examples/triangle.py [--device cuda] [--out triangle.png]
"""

import sys

import torch
from common import context, parse_args, save_png

import prerast


def render(ctx, resolution, device):
    # Clip-space corners (x, y, z, w): with w = 1 these are the screen positions in [-1, 1].
    pos = torch.tensor([[[-0.8, -0.8, 0.0, 1.0], [0.8, -0.8, 0.0, 1.0], [0.0, 0.8, 0.0, 1.0]]], device=device)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device=device)
    colour = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], device=device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (resolution, resolution))
    image, _ = prerast.interpolate(colour, rast, tri)  # perspective-correct blend of the corner colours
    return prerast.antialias(image, rast, pos, tri)  # soft edges, and gradients through them


def main(argv=None):
    args = parse_args("Render a shaded triangle to a PNG.", argv, steps=0, resolution=256, out="triangle.png")
    image = render(context(args.device), args.resolution, args.device)
    print(f"wrote {save_png(args.out, image)}")
    return image


if __name__ == "__main__":
    main(sys.argv[1:])
