"""rasterize benchmarks: random triangle soups of 2 (screen-filling) / 1k / 100k / 1M triangles at 256², 1024², 4096², batch 1 and 8.

Triangles are sized so that the screen is covered about four times over whatever the count, so every scene does
comparable shading work and the count mostly stresses setup and binning.
"""

import math

import torch

import prerast

TRIS = {"2 huge": 2, "1k": 1_000, "100k": 100_000, "1M": 1_000_000}
RES = [256, 1024, 4096]
BATCH = [1, 8]


def scene(num_tris, batch=1, device="cpu", seed=0):
    """pos [batch, 3*num_tris, 4] clip space with perspective (w in [1, 2]), tri [num_tris, 3] int32."""
    g = torch.Generator().manual_seed(seed)
    size = 2.0 * math.sqrt(4.0 / num_tris)  # NDC edge length giving ~4x depth complexity
    centre = torch.rand(batch, num_tris, 1, 2, generator=g) * 2.2 - 1.1
    corner = centre + (torch.rand(batch, num_tris, 3, 2, generator=g) - 0.5) * 2 * size
    z = torch.rand(batch, num_tris, 3, 1, generator=g) * 1.8 - 0.9
    w = 1.0 + torch.rand(batch, num_tris, 1, 1, generator=g).expand(-1, -1, 3, 1)
    pos = torch.cat([corner * w, z * w, w], -1).reshape(batch, 3 * num_tris, 4)
    tri = torch.arange(3 * num_tris, dtype=torch.int32).reshape(num_tris, 3)
    return pos.contiguous().to(device), tri.to(device)


def context(device):
    return prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext(device)


def configs(quick):
    for tname, nt in TRIS.items():
        for res in RES:
            for b in BATCH:
                if quick and (nt > 100_000 or res > 1024 or b > 1):
                    continue
                yield tname, nt, res, b


def cases(device, quick):
    ctx = context(device)
    for tname, nt, res, b in configs(quick):
        pos, tri = scene(nt, b, device)
        pos.requires_grad_(True)
        yield {
            "name": f"rasterize {tname} tris {res}^2 b{b}",
            "forward": lambda pos=pos, tri=tri, res=res: prerast.rasterize(ctx, pos, tri, (res, res)),
            "inputs": [pos],
        }
