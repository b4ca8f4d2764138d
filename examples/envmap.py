"""Fit an environment map (a cube map) to images of a shiny sphere lit by it and by a Phong point light.

Each pixel shows a Phong diffuse and specular term plus the environment reflected about the normal. The
reflection directions are interpolated from the vertices together with their screen derivatives (diff_attrs),
which select the cube map's mip level. Only the cube map is fitted; seen from enough directions, the sphere
reveals all of it.

    python examples/envmap.py [--device cuda] [--steps 300] [--out envmap.png]
"""

import sys

import torch
import torch.nn.functional as F
from common import (
    Progress,
    context,
    homogeneous,
    parse_args,
    perspective,
    random_rotation,
    save_png,
    sphere,
    to_clip,
    translate,
)

import prerast

LIGHT = F.normalize(torch.tensor([0.5, 0.8, 0.6]), dim=0)
# Cube faces +x, -x, +y, -y, +z, -z: the direction of texel (s, t) is N + (2s - 1) S + (2t - 1) T (OpenGL layout).
FACES = [
    ([1, 0, 0], [0, 0, -1], [0, -1, 0]),
    ([-1, 0, 0], [0, 0, 1], [0, -1, 0]),
    ([0, 1, 0], [1, 0, 0], [0, 0, 1]),
    ([0, -1, 0], [1, 0, 0], [0, 0, -1]),
    ([0, 0, 1], [1, 0, 0], [0, -1, 0]),
    ([0, 0, -1], [-1, 0, 0], [0, -1, 0]),
]


def target_environment(size=32):
    """A sky over dark ground with a warm sun low in the west."""
    c = (torch.arange(size) + 0.5) / size * 2 - 1
    t, s = torch.meshgrid(c, c, indexing="ij")
    faces = []
    for n, sd, td in FACES:
        n, sd, td = (torch.tensor(a, dtype=torch.float32) for a in (n, sd, td))
        d = F.normalize(n + s[..., None] * sd + t[..., None] * td, dim=-1)
        up = d[..., 1:2]
        sky = torch.tensor([0.3, 0.5, 0.9]) * (0.5 + 0.5 * up) + 0.2
        ground = torch.tensor([0.25, 0.2, 0.15]) * (1 + up)
        sun = (
            torch.tensor([1.0, 0.7, 0.3])
            * torch.exp(-20 * (1 - (d @ F.normalize(torch.tensor([-1.0, 0.3, 0.2]), dim=0))))[..., None]
        )
        faces.append(torch.where(up > 0, sky, ground) + sun)
    return torch.stack(faces)[None].clamp(0, 1)


def render(ctx, rotations, vertices, tri, env, resolution, edges):
    """The sphere (vertices are its normals) seen by cameras turned by `rotations` around it."""
    camera = perspective(fovy=0.6) @ translate(0, 0, -4.0)
    mvp = torch.stack([camera @ homogeneous(r) for r in rotations]).to(vertices.device)
    pos = to_clip(mvp, vertices)
    eye = torch.stack([r.T @ torch.tensor([0.0, 0.0, 4.0]) for r in rotations]).to(vertices.device)  # world space
    view = F.normalize(eye[:, None] - vertices[None], dim=-1)  # [N, V, 3] towards the eye
    refl = 2 * (view * vertices).sum(-1, keepdim=True) * vertices - view  # mirror direction
    rast, rast_db = prerast.rasterize(ctx, pos, tri, (resolution, resolution))
    r, r_da = prerast.interpolate(refl.contiguous(), rast, tri, rast_db, diff_attrs="all")
    n, _ = prerast.interpolate(vertices, rast, tri)
    n = F.normalize(n + (rast[..., 3:] == 0).float(), dim=-1)  # any unit vector on the background
    light = LIGHT.to(n.device)
    diffuse = 0.3 * (n @ light).clamp(min=0)[..., None]
    specular = 0.5 * (F.normalize(r, dim=-1) @ light).clamp(min=0)[..., None] ** 30
    mirror = prerast.texture(env, r, r_da, filter_mode="linear-mipmap-linear", boundary_mode="cube")
    colour = diffuse * torch.tensor([0.8, 0.8, 0.8], device=n.device) + 0.7 * mirror + specular
    colour = colour * (rast[..., 3:] > 0)
    return prerast.antialias(colour, rast, pos, tri, edges)


def main(argv=None):
    args = parse_args(
        "Fit a cube environment map with Phong shading.", argv, steps=300, resolution=96, out="envmap.png"
    )
    ctx, dev = context(args.device), args.device
    vertices, _, tri = sphere()
    vertices, tri = vertices.to(dev), tri.to(dev)
    edges = prerast.antialias_construct_topology_hash(tri)  # built once, reused by every antialias call
    target_env = target_environment().to(dev)
    fit_env = torch.full_like(target_env, 0.5).requires_grad_(True)
    opt = torch.optim.Adam([fit_env], lr=0.03)
    progress, losses = Progress(args.steps, args.quiet), []
    for step in range(args.steps):
        rotations = [random_rotation() for _ in range(4)]
        with torch.no_grad():
            target = render(ctx, rotations, vertices, tri, target_env, args.resolution, edges)
        fit = render(ctx, rotations, vertices, tri, fit_env, args.resolution, edges)
        loss = torch.mean((fit - target) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        progress(step, losses[-1])
    with torch.no_grad():
        rotations = [random_rotation()]
        pair = torch.cat(
            [render(ctx, rotations, vertices, tri, e, args.resolution, edges) for e in (target_env, fit_env)]
        )
    print(f"wrote {save_png(args.out, pair)} (target | fit)")
    return losses


if __name__ == "__main__":
    main(sys.argv[1:])
