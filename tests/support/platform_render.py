"""Prints, as JSON, the SHA-256 of the raw bytes of a rendered scene's every tensor: the inputs, each op's output
(rasterize, interpolate with derivatives, mipmapped texture, antialias) and the gradients of the inputs for a fixed
upstream gradient. tests/builder/test_aarch64_wheel.py runs it with the x86-64 wheel and with the aarch64 wheel under qemu
and requires the same hashes: the same bits on both machines.

Only prerast's ops compute between the inputs and what is hashed (autograd adds the gradients that reach one
tensor along several paths, an addition of two floats): torch's own kernels may differ between its x86-64 and
aarch64 builds (vector widths, fused multiply-adds), and this compares prerast's.

    python tests/support/platform_render.py
"""

import hashlib
import json
import os
import platform
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import prerast  # noqa: E402
from render_scene import grid_scene  # noqa: E402


def digest(t):
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()


def render_hashes(resolution=(48, 64)):
    pos, tri, uv, tex = grid_scene(n=6, images=2, seed=3)
    for t in (pos, uv, tex):
        t.requires_grad_(True)
    glctx = prerast.RasterizeCpuContext()
    rast, rast_db = prerast.rasterize(glctx, pos, tri, resolution)
    texc, texd = prerast.interpolate(uv, rast, tri, rast_db=rast_db, diff_attrs="all")
    color = prerast.texture(tex, texc, texd, filter_mode="linear-mipmap-linear", max_mip_level=3)
    aa = prerast.antialias(color, rast, pos, tri)
    # A fixed upstream gradient made with NumPy's generator (integer arithmetic: the same on every machine).
    g = torch.tensor(np.random.default_rng(7).uniform(-1, 1, tuple(aa.shape)), dtype=torch.float32)
    gpos, guv, gtex = torch.autograd.grad([aa], [pos, uv, tex], grad_outputs=[g])
    tensors = {
        "in.pos": pos,
        "in.uv": uv,
        "in.tex": tex,
        "in.grad": g,
        "rast": rast,
        "rast_db": rast_db,
        "interp": texc,
        "interp_da": texd,
        "texture": color,
        "antialias": aa,
        "grad.pos": gpos,
        "grad.uv": guv,
        "grad.tex": gtex,
    }
    covered = int((rast[..., 3] > 0).sum())
    return {
        "machine": platform.machine(),
        "torch": torch.__version__,
        "covered": covered,
        "hashes": {k: digest(v) for k, v in tensors.items()},
        "nonzero": {k: int((v != 0).sum()) for k, v in tensors.items()},
    }


if __name__ == "__main__":
    print(json.dumps(render_hashes(), indent=2, sort_keys=True))
