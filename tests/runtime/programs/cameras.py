"""Camera and mesh helpers of the programs' tests, in NumPy float64 (the references are computed from them too)."""

import numpy as np
import torch


def perspective(fovy=0.9, near=0.5, far=10.0):
    """OpenGL-style projection: camera looks down -z; clip w is the distance in front of the camera."""
    f = 1.0 / np.tan(fovy / 2)
    return np.array(
        [[f, 0, 0, 0], [0, f, 0, 0], [0, 0, (far + near) / (near - far), 2 * far * near / (near - far)], [0, 0, -1, 0]]
    )


def look_at(eye, target=(0.0, 0.0, 0.0), up=(0.0, 1.0, 0.0)):
    eye, target, up = (np.asarray(v, np.float64) for v in (eye, target, up))
    back = eye - target
    back /= np.linalg.norm(back)
    right = np.cross(up, back)
    right /= np.linalg.norm(right)
    true_up = np.cross(back, right)
    view = np.eye(4)
    view[:3, :3] = np.stack([right, true_up, back])
    view[:3, 3] = -view[:3, :3] @ eye
    return view


def orbit(count, distance=2.5, elevation=0.35, fovy=0.9):
    """[count, 4, 4] view-projection matrices of cameras on a circle around the origin."""
    mats = []
    for k in range(count):
        a = 2 * np.pi * k / count + 0.3
        eye = distance * np.array(
            [np.cos(a) * np.cos(elevation), np.sin(elevation + 0.2 * k), np.sin(a) * np.cos(elevation)]
        )
        mats.append(perspective(fovy) @ look_at(eye))
    return np.stack(mats)


def octahedron(scale=(0.8, 0.7, 0.6)):
    """(vertices [6, 3], triangles [8, 3]): a convex mesh with outward-facing counter-clockwise triangles."""
    v = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]], np.float64) * scale
    tri = []
    for a in (0, 1):
        for b in (2, 3):
            for c in (4, 5):
                t = [a, b, c]
                n = np.cross(v[b] - v[a], v[c] - v[a])
                tri.append(t if n @ (v[a] + v[b] + v[c]) > 0 else [a, c, b])
    return v, np.array(tri, np.int32)


def clip_positions(verts, mvp):
    """[K, V, 4] clip-space positions of verts [V, 3] (torch, differentiable) under mvp [K, 4, 4]."""
    vh = torch.cat([verts, torch.ones_like(verts[:, :1])], -1)
    return torch.einsum("kij,vj->kvi", mvp, vh).contiguous()


def cross2(a, b):
    return a[0] * b[1] - a[1] * b[0]


def hull(points):
    """Convex hull of 2D points, counter-clockwise (Andrew's monotone chain)."""
    pts = sorted(map(tuple, np.asarray(points, np.float64)))

    def half(seq):
        out = []
        for p in seq:
            while len(out) >= 2 and cross2(np.subtract(out[-1], out[-2]), np.subtract(p, out[-2])) <= 0:
                out.pop()
            out.append(p)
        return out[:-1]

    return np.array(half(pts) + half(pts[::-1]))


def polygon_area(poly):
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


def distance_inside(poly, px, py):
    """Signed distance of points to a counter-clockwise convex polygon's boundary (positive inside)."""
    d = np.full(px.shape, np.inf)
    for a, b in zip(poly, np.roll(poly, -1, axis=0)):
        e = b - a
        n = np.array([-e[1], e[0]]) / np.linalg.norm(e)  # inward normal of a counter-clockwise edge
        d = np.minimum(d, (px - a[0]) * n[0] + (py - a[1]) * n[1])
    return d


def pixel_grid(height, width):
    """Pixel centres in pixel units (x right, y up from the bottom row), as prerast's rows are stored."""
    return np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
