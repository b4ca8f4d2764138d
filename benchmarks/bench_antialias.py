"""antialias benchmarks on the rasterize scenes (1k / 100k / 1M triangles at 256², 1024², 4096², batch 1 and 8),
with 3 and 32 colour channels; the topology hash is built once per scene, as a training loop would."""

import os
import sys

import torch

import prerast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_interpolate import rasterized_scenes  # noqa: E402

CHANNELS = [3, 32]


def cases(device, quick):
    for label, pos, tri, rast, _ in rasterized_scenes(device, quick):
        topo = prerast.antialias_construct_topology_hash(tri)
        p = pos.detach().clone().requires_grad_(True)
        for ch in CHANNELS:
            color = torch.rand(*rast.shape[:3], ch, device=device, requires_grad=True)
            yield {
                "name": f"antialias {label} c{ch}",
                "forward": lambda color=color, p=p, rast=rast, tri=tri, topo=topo: prerast.antialias(
                    color, rast, p, tri, topo
                ),
                "inputs": [color, p],
            }
