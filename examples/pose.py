"""Recover an object's rotation from its silhouettes alone.

A box of three different side lengths is seen from three fixed cameras. Its silhouettes under an unknown target
rotation are the only data; starting 40 degrees off, gradient descent on a quaternion turns the box until its
silhouettes match. Only antialias gives silhouettes a gradient with respect to the vertex positions.

    python examples/pose.py [--device cuda] [--steps 200] [--out pose.png]
"""

import math
import sys

import torch
from common import Progress, context, cube, homogeneous, parse_args, perspective, rotation, save_png, to_clip, translate

import prerast


def quat_about(axis, angle):
    axis = torch.tensor(axis, dtype=torch.float32)
    return torch.cat([torch.tensor([math.cos(angle / 2)]), math.sin(angle / 2) * axis / axis.norm()])


def quat_mul(a, b):
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return torch.stack(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )


def silhouettes(ctx, cameras, vertices, quat, tri, resolution, edges):
    pos = to_clip(cameras @ homogeneous(rotation(quat)).to(cameras.device), vertices)
    rast, _ = prerast.rasterize(ctx, pos, tri, (resolution, resolution))
    covered = (rast[..., 3:] > 0).float()
    return prerast.antialias(covered, rast, pos, tri, edges)


def angle_between(q1, q2):
    """Rotation angle between two orientations, in degrees."""
    d = abs(float(torch.dot(q1 / q1.norm(), q2 / q2.norm())))
    return math.degrees(2 * math.acos(min(1.0, d)))


def main(argv=None):
    args = parse_args("Recover a rotation from silhouettes.", argv, steps=200, resolution=96, out="pose.png")
    ctx, dev = context(args.device), args.device
    box, tri = cube()
    box, tri = (box * torch.tensor([1.2, 0.7, 0.35])).to(dev), tri.to(dev)
    edges = prerast.antialias_construct_topology_hash(tri)  # built once, reused by every antialias call
    project = perspective() @ translate(0, 0, -3.0)
    cameras = torch.stack(
        [
            project @ homogeneous(rotation(quat_about(a, t)))
            for a, t in (([0, 1, 0], 0.0), ([0, 1, 0], 1.3), ([1, 0, 0], 1.2))
        ]
    ).to(dev)
    target_q = quat_about([0.3, 1.0, 0.2], 0.9)
    fit_q = quat_mul(target_q, quat_about([1.0, -0.5, 0.4], math.radians(40))).clone().requires_grad_(True)
    with torch.no_grad():
        target = silhouettes(ctx, cameras, box, target_q, tri, args.resolution, edges)
    opt = torch.optim.Adam([fit_q], lr=0.01)
    progress, losses = Progress(args.steps, args.quiet), []
    for step in range(args.steps):
        loss = torch.mean((silhouettes(ctx, cameras, box, fit_q, tri, args.resolution, edges) - target) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        progress(step, losses[-1])
    if not args.quiet:
        print(f"off by {angle_between(fit_q.detach(), target_q):.2f} degrees (started at 40)")
    with torch.no_grad():
        fit = silhouettes(ctx, cameras, box, fit_q, tri, args.resolution, edges)
    rows = torch.cat([fit, target], 1).expand(-1, -1, -1, 3)  # row 0 is the bottom: target ends up above
    print(f"wrote {save_png(args.out, rows)} (per camera: target above, fit below)")
    return losses


if __name__ == "__main__":
    main(sys.argv[1:])
