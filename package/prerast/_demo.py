"""A small scene rendered end to end, used by `python -m prerast demo` and the install smoke tests."""

import math
import time

import numpy as np
import torch


def scene(device):
    """A perspective-projected tetrahedron-like mesh in front of a ground quad: several depths, shared edges."""
    verts = torch.tensor(
        [
            [-0.6, -0.5, 0.0],
            [0.6, -0.5, 0.0],
            [0.0, 0.6, 0.0],
            [0.0, -0.1, -0.7],
            [-2.0, -0.8, 2.0],
            [2.0, -0.8, 2.0],
            [2.0, -0.8, -3.0],
            [-2.0, -0.8, -3.0],
        ]
    )
    tri = torch.tensor([[0, 1, 2], [0, 3, 1], [1, 3, 2], [2, 3, 0], [4, 5, 6], [4, 6, 7]], dtype=torch.int32)
    a = math.radians(25)
    rot = torch.tensor([[math.cos(a), 0, math.sin(a)], [0, 1, 0], [-math.sin(a), 0, math.cos(a)]])
    v = verts @ rot.T + torch.tensor([0.0, 0.0, -2.5])
    f, near, far = 1.0 / math.tan(math.radians(30)), 0.1, 10.0
    proj = torch.tensor(
        [
            [f, 0, 0, 0],
            [0, f, 0, 0],
            [0, 0, -(far + near) / (far - near), -2 * far * near / (far - near)],
            [0, 0, -1, 0],
        ]
    )
    pos = torch.cat([v, torch.ones(len(v), 1)], 1) @ proj.T
    return pos[None].contiguous().to(device), tri.to(device)


def render(device="cpu", resolution=256):
    """Returns (image uint8 [H, W, 3] top row first, seconds for the first frame)."""
    import prerast

    start = time.perf_counter()
    ctx = prerast.RasterizeCpuContext() if device == "cpu" else prerast.RasterizeCudaContext(device)
    pos, tri = scene(device)
    rast, _ = prerast.rasterize(ctx, pos, tri, (resolution, resolution))
    rast = rast[0].cpu()
    elapsed = time.perf_counter() - start
    u, v, tid = rast[..., 0], rast[..., 1], rast[..., 3]
    palette = torch.tensor(
        [[0, 0, 0], [230, 90, 60], [90, 200, 90], [70, 120, 230], [230, 200, 60], [150, 150, 150], [130, 130, 130]],
        dtype=torch.float32,
    )
    base = palette[tid.long().clamp(0, len(palette) - 1)]
    shade = (0.6 + 0.4 * torch.stack([u, v, 1 - u - v], -1).max(-1).values)[..., None]
    img = (base * shade).clamp(0, 255).to(torch.uint8).numpy()
    return np.ascontiguousarray(img[::-1]), elapsed
