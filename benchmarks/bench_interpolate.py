"""interpolate benchmarks on the rasterize scenes (1k / 100k / 1M triangles at 256², 1024², 4096², batch 1 and
8), with 3 attributes (and their screen-space derivatives) and with 32 attributes."""

import os
import sys

import torch

import prerast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_rasterize  # noqa: E402  (its scenes and configurations)

ATTRS = [3, 32]


def rasterized_scenes(device, quick):
    """Yields (label, pos, tri, rast, rast_db) for every rasterize benchmark configuration."""
    ctx = bench_rasterize.context(device)
    for tname, nt, res, b in bench_rasterize.configs(quick):
        pos, tri = bench_rasterize.scene(nt, b, device)
        with torch.no_grad():
            rast, rast_db = prerast.rasterize(ctx, pos, tri, (res, res))
        yield f"{tname} tris {res}^2 b{b}", pos, tri, rast, rast_db


def cases(device, quick):
    for label, pos, tri, rast, rast_db in rasterized_scenes(device, quick):
        for num_attrs in ATTRS:
            attr = torch.rand(pos.shape[0], pos.shape[1], num_attrs, device=device, requires_grad=True)
            r = rast.clone().requires_grad_(True)
            if num_attrs == 3:  # with derivatives: gradients to rast_db too
                db = rast_db.clone().requires_grad_(True)
                yield {
                    "name": f"interpolate {label} a3+da",
                    "forward": lambda attr=attr, r=r, db=db, tri=tri: prerast.interpolate(attr, r, tri, db, "all"),
                    "inputs": [attr, r, db],
                }
            else:
                yield {
                    "name": f"interpolate {label} a{num_attrs}",
                    "forward": lambda attr=attr, r=r, tri=tri: prerast.interpolate(attr, r, tri),
                    "inputs": [attr, r],
                }
