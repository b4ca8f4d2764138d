"""Independent NumPy models of prerast's operations, in float64.

The rasterizer model solves M @ lam = (px, py, 1) per pixel with numpy.linalg (M's columns are the vertices'
clip-space x, y, w): a pixel is covered when every lam_i >= 0 and sum(lam) > 0, i.e. inside the triangle with
w > 0. It shares no code or formulation details (edge functions, tie rules, binning) with the plugin.
"""

import numpy as np


def pixel_centers(height, width):
    xs = (2 * np.arange(width) + 1) / width - 1
    ys = (2 * np.arange(height) + 1) / height - 1
    px, py = np.meshgrid(xs, ys)  # [H, W], row 0 = bottom
    return px, py


def tri_barycentrics(p, height, width):
    """For one triangle p [3, 4]: (lam [H, W, 3], ok) with lam = M^-1 q, or None if M is singular."""
    M = np.stack([p[:, 0], p[:, 1], p[:, 3]]).astype(np.float64)  # rows x, y, w; columns vertices
    if not np.all(np.isfinite(M)) or abs(np.linalg.det(M)) < 1e-12 * np.prod(np.linalg.norm(M, axis=0)):
        return None
    px, py = pixel_centers(height, width)
    q = np.stack([px, py, np.ones_like(px)], axis=-1)  # [H, W, 3]
    lam = q @ np.linalg.inv(M).T
    return lam


def rasterize(pos, tri, height, width, ranges=None, eps=1e-5):
    """Returns (rast [N,H,W,4], ambiguous [N,H,W], near_cover [N,T+1,H,W]).

    ambiguous marks pixels whose result float32 rounding may legitimately change: a pixel centre within eps
    (relative, in barycentric terms) of some triangle's edge, a near tie in depth, or z/w near the clip planes.
    near_cover[n, id] says triangle id-1 covers the pixel up to that tolerance (index 0: background allowed).
    """
    pos = np.asarray(pos, np.float64)
    tri = np.asarray(tri)
    if ranges is None:
        images = [(pos[n], range(len(tri))) for n in range(pos.shape[0])]
    else:
        images = [(pos, range(int(f), int(f) + int(c))) for f, c in np.asarray(ranges)]
    N = len(images)
    out = np.zeros((N, height, width, 4))
    ambiguous = np.zeros((N, height, width), bool)
    near_cover = np.zeros((N, len(tri) + 1, height, width), bool)
    for n, (p_img, tris) in enumerate(images):
        best = np.full((height, width), np.inf)
        zs = []
        for t in tris:
            lam = tri_barycentrics(p_img[tri[t]], height, width)
            if lam is None:
                continue
            s = lam.sum(-1)
            with np.errstate(divide="ignore", invalid="ignore"):
                b = lam / s[..., None]
                zw = (lam * p_img[tri[t], 2]).sum(-1)
            inside = np.all(lam >= 0, -1) & (s > 0) & (zw >= -1) & (zw <= 1)
            tol = eps * np.abs(lam).max(-1)
            loose = np.all(lam >= -tol[..., None], -1) & (s > 0) & (zw >= -1 - 1e-5) & (zw <= 1 + 1e-5)
            near_cover[n, t + 1] = loose
            ambiguous |= loose & (np.abs(lam).min(-1) <= tol)  # on or near an edge: the tie rule decides
            ambiguous |= inside & ((np.abs(zw - 1) < 1e-5) | (np.abs(zw + 1) < 1e-5))
            zs.append(np.where(inside, zw, np.inf))
            win = inside & (zw < best)
            best = np.where(win, zw, best)
            out[n][win] = np.stack([b[..., 0], b[..., 1], zw, np.full_like(zw, t + 1)], -1)[win]
        if len(zs) > 1:
            z2 = np.sort(np.stack(zs), axis=0)[:2]
            with np.errstate(invalid="ignore"):
                ambiguous[n] |= np.isfinite(z2[1]) & (np.abs(z2[1] - z2[0]) < 1e-5)
        near_cover[n, 0] = True
    return out, ambiguous, near_cover


def rast_db(pos, tri, rast, height, width, ranges=None):
    """Analytic (du/dX, du/dY, dv/dX, dv/dY) by central differences of the exact barycentric map (float64)."""
    pos = np.asarray(pos, np.float64)
    out = np.zeros(rast.shape)
    px, py = pixel_centers(height, width)
    h = 1e-4
    for n in range(rast.shape[0]):
        ids = rast[n, ..., 3].astype(np.int64)
        p_img = pos if ranges is not None else pos[n]
        for t in np.unique(ids[ids > 0]) - 1:
            M = np.stack([p_img[tri[t], 0], p_img[tri[t], 1], p_img[tri[t], 3]])
            K = np.linalg.inv(M)
            sel = ids == t + 1

            def uv(x, y, K=K):
                lam = np.stack([x, y, np.ones_like(x)], -1) @ K.T
                return lam[..., :2] / lam.sum(-1, keepdims=True)

            x, y = px[sel], py[sel]
            dX = (uv(x + h, y) - uv(x - h, y)) / (2 * h) * (2 / width)
            dY = (uv(x, y + h) - uv(x, y - h)) / (2 * h) * (2 / height)
            out[n][sel] = np.stack([dX[:, 0], dY[:, 0], dX[:, 1], dY[:, 1]], -1)
    return out


def encode_triangle_id(n):
    """rast[..., 3] for stored IDs n (triangle index + 1) as float32: n itself up to 2^24, above it the float whose
    bit pattern is 0x4a800000 + n (written with integer arithmetic, independently of the float conversion)."""
    n = np.asarray(n, np.int64)
    small = n.astype(np.float32)
    large = (n + 0x4A800000).astype(np.uint32).view(np.float32)
    return np.where(n <= 2**24, small, large)


def decode_triangle_id(f):
    f = np.asarray(f, np.float32)
    bits = f.view(np.uint32).astype(np.int64)
    return np.where(f <= 2**24, np.minimum(f, 2**24).astype(np.int64), bits - 0x4A800000)
