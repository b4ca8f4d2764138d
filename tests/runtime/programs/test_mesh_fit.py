"""A mask + depth + normal renderer as mesh-generation programs write one on nvdiffrast: vertex normals computed
from the mesh, view-space depth and normals interpolated, every image antialiased against the background, and a
loss over the three. Interior pixels are checked against a NumPy model (its own rasterizer and perspective-correct
interpolation), the mask against the projected hull, the vertex gradients against finite differences of the same
forward, and a short fit against the true mesh."""

import numpy as np
import torch
from cameras import clip_positions, distance_inside, hull, look_at, octahedron, perspective, pixel_grid, polygon_area

import prerast
import reference
from conftest import make_ctx
from finite_diff import check_gradients

H, W = 36, 44
EYES = ([1.6, 1.1, 1.9], [-2.1, 0.4, 1.2])


def matrices():
    views = np.stack([look_at(e) for e in EYES])
    return views, perspective() @ views


def vertex_normals(verts, tri):
    """Area-weighted sums of the adjacent faces' normals, normalised (differentiable in verts)."""
    a, b, c = verts[tri[:, 0].long()], verts[tri[:, 1].long()], verts[tri[:, 2].long()]
    face = torch.cross(b - a, c - a, dim=1)
    n = torch.zeros_like(verts).index_add(0, tri.flatten().long(), face.repeat_interleave(3, 0))
    return n / n.norm(dim=1, keepdim=True)


def render(ctx, verts, tri, view, mvp, topology_hash=None):
    """(mask [K, H, W, 1], depth [K, H, W, 1], normal [K, H, W, 3]), each antialiased against a zero background;
    depth is the view-space distance in front of the camera, normal the view-space normal mapped to [0, 1]."""
    pos = clip_positions(verts, mvp)
    rast, _ = prerast.rasterize(ctx, pos, tri, (H, W))
    covered = (rast[..., 3:] > 0).float()
    eye_space = clip_positions(verts, view)
    depth, _ = prerast.interpolate(-eye_space[..., 2:3], rast, tri)
    normals = torch.einsum("kij,vj->kvi", view[:, :3, :3], vertex_normals(verts, tri))
    normal, _ = prerast.interpolate(normals.contiguous(), rast, tri)
    normal = torch.nn.functional.normalize(normal, dim=-1) * 0.5 + 0.5
    topology_hash = topology_hash or prerast.antialias_construct_topology_hash(tri)  # built once per call at most
    return tuple(prerast.antialias(x * covered, rast, pos, tri, topology_hash) for x in (covered, depth, normal))


def scene(device):
    v, tri = octahedron()
    views, mvps = matrices()
    as_t = lambda a: torch.tensor(a, dtype=torch.float32, device=device)  # noqa: E731
    return as_t(v), torch.tensor(tri, device=device), as_t(views), as_t(mvps), v, tri


def numpy_model(v, tri, views, mvps):
    """Depth and normal images from reference.rasterize's barycentrics, in float64."""
    n = np.zeros_like(v)
    for t in tri:
        face = np.cross(v[t[1]] - v[t[0]], v[t[2]] - v[t[0]])
        n[t] += face
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    vh = np.c_[v, np.ones(len(v))]
    clip = np.einsum("kij,vj->kvi", mvps, vh)
    rast, ambiguous, _ = reference.rasterize(clip, tri, H, W)
    ids = rast[..., 3].astype(np.int64) - 1
    lam = np.stack([rast[..., 0], rast[..., 1], 1 - rast[..., 0] - rast[..., 1]], -1)
    depth, normal = np.zeros((len(views), H, W)), np.zeros((len(views), H, W, 3))
    for k, view in enumerate(views):
        vd = -(vh @ view.T)[:, 2]
        vn = n @ view[:3, :3].T
        corners = tri[np.maximum(ids[k], 0)]  # [H, W, 3] vertex indices of each pixel's triangle
        depth[k] = (lam[k] * vd[corners]).sum(-1)
        m = (lam[k][..., None] * vn[corners]).sum(-2)
        normal[k] = m / np.linalg.norm(m, axis=-1, keepdims=True) * 0.5 + 0.5
    return clip, ids, ambiguous, depth, normal


def test_images_match_the_numpy_model(device):
    ctx = make_ctx(device)
    verts, tri, view, mvp, v64, tri64 = scene(device)
    mask, depth, normal = (x.cpu().double().numpy() for x in render(ctx, verts, tri, view, mvp))
    clip, ids, ambiguous, want_depth, want_normal = numpy_model(v64, tri64, *matrices())
    px, py = pixel_grid(H, W)
    for k in range(len(EYES)):
        poly = hull((clip[k, :, :2] / clip[k, :, 3:] + 1) / 2 * [W, H])
        inside = (distance_inside(poly, px, py) > 1.5) & ~ambiguous[k]  # pixels antialiasing leaves alone
        assert inside.sum() > 100 and (ids[k][inside] >= 0).all()
        assert (mask[k, ..., 0][inside] == 1).all()
        np.testing.assert_allclose(depth[k, ..., 0][inside], want_depth[k][inside], rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(normal[k][inside], want_normal[k][inside], atol=5e-5)
        distance = np.linalg.norm(EYES[k])  # the mesh lies within 0.8 of the origin
        assert distance - 0.8 < want_depth[k][inside].min() and want_depth[k][inside].max() < distance + 0.8
        area = polygon_area(poly)
        assert abs(mask[k].sum() - area) < 0.02 * area + 2
        # Background stays zero in every image.
        outside = distance_inside(poly, px, py) < -1.5
        assert (mask[k][outside] == 0).all() and (depth[k][outside] == 0).all() and (normal[k][outside] == 0).all()


def test_vertex_gradients_match_finite_differences(device):
    ctx = make_ctx(device)
    verts, tri, view, mvp, _, _ = scene(device)

    def images(verts):
        return torch.cat([x.flatten() for x in render(ctx, verts, tri, view, mvp)])

    # rtol just above check_gradients' 5 % test for a jump within eps, as in test_multiview_silhouette.
    check_gradients(
        images, {"verts": verts}, ["verts"], eps=5e-5, rtol=6e-2, atol=5e-2, min_checked=0.5, max_elements=10
    )


def test_fit_moves_the_mesh_towards_the_target(device):
    ctx = make_ctx(device)
    verts, tri, view, mvp, _, _ = scene(device)
    topology_hash = prerast.antialias_construct_topology_hash(tri)  # the mesh's connectivity does not change
    targets = [x.detach() for x in render(ctx, verts, tri, view, mvp, topology_hash)]
    start = verts * torch.tensor([1.15, 0.9, 1.1], device=device)
    offset = torch.zeros_like(verts, requires_grad=True)
    opt = torch.optim.Adam([offset], lr=0.015)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        images = render(ctx, start + offset, tri, view, mvp, topology_hash)
        loss = sum((x - t).abs().mean() for x, t in zip(images, targets))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    error = lambda v: float((v - verts).norm(dim=1).mean())  # noqa: E731
    assert losses[-1] < 0.5 * losses[0]
    assert error(start + offset.detach()) < 0.75 * error(start)
