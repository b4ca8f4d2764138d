"""What the example programs share: command-line options, a context for the chosen device, camera matrices,
meshes, a progress line and a PNG writer (standard library only)."""

import argparse
import math
import os
import struct
import sys
import time
import zlib

import numpy as np
import torch

import prerast


def parse_args(description, argv, steps, resolution, out):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--steps", type=int, default=steps, help=f"optimisation steps (default {steps})")
    p.add_argument("--resolution", type=int, default=resolution, help=f"image side in pixels (default {resolution})")
    p.add_argument("--out", default=out, help=f"PNG written at the end (default {out})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress output")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    return args


def context(device):
    if torch.device(device).type == "cuda":
        return prerast.RasterizeCudaContext(device)
    return prerast.RasterizeCpuContext()


# --- cameras ---------------------------------------------------------------------------------------------------


def perspective(fovy=0.8, near=0.1, far=20.0):
    """OpenGL-style projection for a square image: camera looks down -z."""
    f = 1.0 / math.tan(fovy / 2)
    return torch.tensor(
        [[f, 0, 0, 0], [0, f, 0, 0], [0, 0, (far + near) / (near - far), 2 * far * near / (near - far)], [0, 0, -1, 0]]
    )


def translate(x, y, z):
    m = torch.eye(4)
    m[:3, 3] = torch.tensor([x, y, z])
    return m


def rotation(quat):
    """3x3 rotation of a (w, x, y, z) quaternion (normalised here); differentiable."""
    w, x, y, z = quat / quat.norm()
    return torch.stack(
        [
            torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)]),
            torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)]),
            torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]),
        ]
    )


def random_rotation(generator=None):
    return rotation(torch.randn(4, generator=generator))


def homogeneous(rot3):
    m = torch.eye(4, dtype=rot3.dtype)
    return torch.cat([torch.cat([rot3, torch.zeros(3, 1)], 1), m[3:]], 0)


def to_clip(mvp, vertices):
    """[N, 4, 4] or [4, 4] matrices applied to [V, 3] points: clip-space [N, V, 4]."""
    v = torch.cat([vertices, torch.ones_like(vertices[:, :1])], 1)
    return torch.matmul(v, mvp.transpose(-1, -2)).reshape(-1, len(vertices), 4)


# --- meshes ----------------------------------------------------------------------------------------------------


def cube():
    """Unit cube around the origin: 8 corners [8, 3] and 12 triangles [12, 3], wound counter-clockwise."""
    v = torch.tensor([[x, y, z] for x in (-0.5, 0.5) for y in (-0.5, 0.5) for z in (-0.5, 0.5)])
    tri = torch.tensor(
        [
            [0, 1, 3],
            [0, 3, 2],
            [4, 6, 7],
            [4, 7, 5],
            [0, 4, 5],
            [0, 5, 1],
            [2, 3, 7],
            [2, 7, 6],
            [0, 2, 6],
            [0, 6, 4],
            [1, 5, 7],
            [1, 7, 3],
        ],
        dtype=torch.int32,
    )
    return v, tri


def sphere(rings=16, segments=32):
    """Unit UV sphere: positions [V, 3], texture coordinates [V, 2] (u around, v from pole to pole), triangles.
    The seam column is doubled so that u runs 0..1 without wrapping inside a triangle."""
    theta = torch.linspace(0, math.pi, rings + 1)[:, None]
    phi = torch.linspace(0, 2 * math.pi, segments + 1)[None, :]
    pos = torch.stack(
        [
            torch.sin(theta) * torch.cos(phi),
            torch.cos(theta).expand(-1, segments + 1),
            -torch.sin(theta) * torch.sin(phi),
        ],
        -1,
    ).reshape(-1, 3)
    uv = torch.stack(
        [(phi / (2 * math.pi)).expand(rings + 1, -1), (theta / math.pi).expand(-1, segments + 1)], -1
    ).reshape(-1, 2)
    i = torch.arange(rings)[:, None] * (segments + 1) + torch.arange(segments)[None, :]
    a, b, c, d = i, i + 1, i + segments + 1, i + segments + 2
    tri = torch.cat([torch.stack([a, c, b], -1).reshape(-1, 3), torch.stack([b, c, d], -1).reshape(-1, 3)])
    return pos, uv, tri.int()


# --- output ----------------------------------------------------------------------------------------------------


class Progress:
    """Prints the loss every few steps: one bar redrawn in place on a terminal, one line per report otherwise."""

    def __init__(self, steps, quiet=False, every=None):
        self.steps, self.quiet = steps, quiet
        self.every = every or max(1, steps // 20)
        self.tty = sys.stdout.isatty()
        self.start = time.time()

    def __call__(self, step, loss):
        if self.quiet or (step % self.every and step != self.steps - 1):
            return
        done = (step + 1) / self.steps
        bar = "#" * int(30 * done) + "." * (30 - int(30 * done))
        line = f"[{bar}] {step + 1}/{self.steps}  loss {loss:.6f}  {time.time() - self.start:.1f}s"
        print("\r" + line if self.tty else line, end="" if self.tty and step != self.steps - 1 else "\n", flush=True)


def save_png(path, images):
    """Images [N, H, W, 3] (rasterizer order, row 0 at the bottom) side by side into an 8-bit RGB PNG."""
    img = torch.cat(list(images.detach().float().cpu().clamp(0, 1)), 1).flip(0)
    pixels = (img.numpy() * 255 + 0.5).astype(np.uint8)
    h, w, _ = pixels.shape
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b"")
        )
    return path
