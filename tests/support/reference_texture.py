"""Independent NumPy model of prerast.texture and texture_construct_mip, in float64.

Follows the documented behaviour (package/prerast/_texture.py) with a different formulation from the plugin:
mip levels by reshaping and averaging, cube faces as 3D basis vectors, and taps that fall off a cube face
re-projected geometrically (in floating point) onto the cube. The one thing copied in float32 is the texture
coordinate x = u * size - 0.5, so that which texel a far-outside coordinate lands on agrees exactly.
"""

import numpy as np

from prerast._constants import FILTER_MODES

# The modes the tests compare: the package's own list (only the names; the model's arithmetic imports nothing).
FILTERS = tuple(FILTER_MODES)

# Cube faces +x, -x, +y, -y, +z, -z: (normal N, s direction U, t direction V); a direction d on face f has
# s = (d.U / d.N + 1) / 2 and t = (d.V / d.N + 1) / 2 (OpenGL's cube map layout).
CUBE_FACES = np.array(
    [
        [[1, 0, 0], [0, 0, -1], [0, -1, 0]],
        [[-1, 0, 0], [0, 0, 1], [0, -1, 0]],
        [[0, 1, 0], [1, 0, 0], [0, 0, 1]],
        [[0, -1, 0], [1, 0, 0], [0, 0, -1]],
        [[0, 0, 1], [1, 0, 0], [0, -1, 0]],
        [[0, 0, -1], [-1, 0, 0], [0, -1, 0]],
    ],
    dtype=np.float64,
)


# --- mip chain ---------------------------------------------------------------------------------------------


def _halve_axis(a, axis):
    s = a.shape[axis]
    if s == 1:
        return a
    d = s // 2
    a = np.moveaxis(a, axis, 0)
    out = a[: 2 * d].reshape(d, 2, *a.shape[1:]).mean(axis=1)
    if s % 2:
        out[d - 1] = a[2 * d - 2 :].mean(axis=0)  # the odd last texel joins the last box
    return np.moveaxis(out, 0, axis)


def mip_chain(tex, max_mip_level=None):
    """Levels 1..n of tex [..., h, w, C]: each halves the previous one's sides by box averages."""
    levels = []
    level = np.asarray(tex, dtype=np.float64)
    while (max_mip_level is None or len(levels) < max_mip_level) and max(level.shape[-3:-1]) > 1:
        level = _halve_axis(_halve_axis(level, level.ndim - 3), level.ndim - 2)
        levels.append(level)
    return levels


# --- 2D lookups ----------------------------------------------------------------------------------------------


def _coord(u, size):
    """Texel-space coordinate in float32, as the plugin computes it."""
    return (np.float32(u) * np.float32(size)).astype(np.float32)


def _fetch_2d(level, n, ix, iy, boundary):
    h, w = level.shape[1:3]
    ix, iy = ix.astype(np.int64), iy.astype(np.int64)
    if boundary == "wrap":
        ix, iy, ok = ix % w, iy % h, np.ones(ix.shape, bool)
    elif boundary == "clamp":
        ix, iy, ok = np.clip(ix, 0, w - 1), np.clip(iy, 0, h - 1), np.ones(ix.shape, bool)
    else:  # zero
        ok = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        ix, iy = np.clip(ix, 0, w - 1), np.clip(iy, 0, h - 1)
    return level[n, iy, ix] * ok[:, None]


def _bilinear(fetch, x, y):
    """Bilinear filter at texel-space (x, y) (texel centres at integers + 0.5), fetch(ix, iy) -> [P, C]."""
    xs, ys = x.astype(np.float64) - 0.5, y.astype(np.float64) - 0.5
    x0, y0 = np.floor(xs), np.floor(ys)
    fx, fy = (xs - x0)[:, None], (ys - y0)[:, None]
    return (
        (1 - fx) * (1 - fy) * fetch(x0, y0)
        + fx * (1 - fy) * fetch(x0 + 1, y0)
        + (1 - fx) * fy * fetch(x0, y0 + 1)
        + fx * fy * fetch(x0 + 1, y0 + 1)
    )


def sample_2d(level, n, u, v, boundary, nearest):
    """level [Nt, h, w, C]; n, u, v [P] -> [P, C]."""
    h, w = level.shape[1:3]
    x, y = _coord(u, w), _coord(v, h)
    if nearest:
        return _fetch_2d(level, n, np.floor(x), np.floor(y), boundary)
    # x - 0.5 is exact in float32 for the sizes tested, so the float64 subtraction in _bilinear agrees.
    return _bilinear(lambda ix, iy: _fetch_2d(level, n, ix, iy, boundary), x, y)


# --- cube lookups --------------------------------------------------------------------------------------------


def cube_face(d):
    """Face index and (s, t) in [0, 1] of directions d [P, 3]; ties go to x, then y."""
    d = np.asarray(d, np.float64)
    m = np.argmax(np.abs(d), axis=-1)
    face = 2 * m + (d[np.arange(len(d)), m] < 0)
    N, U, V = (CUBE_FACES[face, i] for i in range(3))
    q = np.sum(d * N, -1)
    return face, (np.sum(d * U, -1) / q + 1) / 2, (np.sum(d * V, -1) / q + 1) / 2


def _fetch_cube(level, n, face, ix, iy):
    """Texel (ix, iy) of `face`, continuing across edges; off a corner, the mean of the three corner texels."""
    S = level.shape[2]
    ix, iy = ix.astype(np.int64), iy.astype(np.int64)
    out_x, out_y = (ix < 0) | (ix >= S), (iy < 0) | (iy >= S)
    result = np.zeros((len(ix), level.shape[-1]))
    inside = ~out_x & ~out_y
    result[inside] = level[n[inside], face[inside], iy[inside], ix[inside]]
    edge = out_x ^ out_y
    if edge.any():
        # The tap's centre on the face's plane, extended past the edge, re-projected onto the cube.
        N, U, V = (CUBE_FACES[face[edge], i] for i in range(3))
        p = N + ((2 * ix[edge] + 1) / S - 1)[:, None] * U + ((2 * iy[edge] + 1) / S - 1)[:, None] * V
        f2, s2, t2 = cube_face(p)
        x2 = np.clip(np.floor(s2 * S), 0, S - 1).astype(np.int64)
        y2 = np.clip(np.floor(t2 * S), 0, S - 1).astype(np.int64)
        result[edge] = level[n[edge], f2, y2, x2]
    corner = out_x & out_y
    if corner.any():
        cx, cy = np.clip(ix[corner], 0, S - 1), np.clip(iy[corner], 0, S - 1)
        nc, fc = n[corner], face[corner]
        result[corner] = (
            _fetch_cube(level, nc, fc, cx, cy)
            + _fetch_cube(level, nc, fc, ix[corner], cy)
            + _fetch_cube(level, nc, fc, cx, iy[corner])
        ) / 3
    return result


def sample_cube(level, n, d, nearest):
    """level [Nt, 6, S, S, C]; n [P], d [P, 3] -> [P, C]."""
    S = level.shape[2]
    face, s, t = cube_face(d)
    x, y = s * S, t * S
    if nearest:
        ix, iy = np.clip(np.floor(x), 0, S - 1), np.clip(np.floor(y), 0, S - 1)
        return _fetch_cube(level, n, face, ix, iy)
    return _bilinear(lambda ix, iy: _fetch_cube(level, n, face, ix, iy), x, y)


def cube_jacobian(d, dd):
    """Derivative of (s, t) along a screen axis, for directions d [P, 3] changing by dd [P, 3] per pixel."""
    face, _, _ = cube_face(d)
    N, U, V = (CUBE_FACES[face, i] for i in range(3))
    q, dq = np.sum(d * N, -1), np.sum(dd * N, -1)
    ds = (np.sum(dd * U, -1) * q - np.sum(d * U, -1) * dq) / (2 * q * q)
    dt = (np.sum(dd * V, -1) * q - np.sum(d * V, -1) * dq) / (2 * q * q)
    return np.stack([ds, dt], -1)


# --- texture -------------------------------------------------------------------------------------------------


def footprint_major(jx, jy):
    """Squared major axis of the footprint ellipse: the larger eigenvalue of [[A, C], [C, B]] (closed form)."""
    a, b, c = (jx**2).sum(-1), (jy**2).sum(-1), (jx * jy).sum(-1)
    return (a + b) / 2 + np.sqrt(((a - b) / 2) ** 2 + c**2)


def level_of_detail(tex_shape, uv, uv_da, bias, num_levels, cube):
    """LOD per pixel [P] before clamping (0 footprint -> -inf), then clamped to [0, num_levels - 1]."""
    P = len(uv)
    lod = np.zeros(P)
    if uv_da is not None:
        if cube:
            S = tex_shape[-2]
            jx = S * cube_jacobian(uv, uv_da[:, 0::2])
            jy = S * cube_jacobian(uv, uv_da[:, 1::2])
        else:
            h, w = tex_shape[-3:-1]
            jx = np.stack([w * uv_da[:, 0], h * uv_da[:, 2]], -1)
            jy = np.stack([w * uv_da[:, 1], h * uv_da[:, 3]], -1)
        m = footprint_major(jx, jy)
        with np.errstate(divide="ignore"):
            lod = 0.5 * np.log2(m)
    if bias is not None:
        lod = lod + bias
    return np.clip(lod, 0, num_levels - 1)


def texture(tex, uv, uv_da=None, bias=None, mip=None, filter_mode="auto", boundary_mode="wrap", max_mip_level=None):
    """The documented behaviour of prerast.texture on NumPy arrays; returns float64 [N, H, W, C]."""
    tex = np.asarray(tex, np.float64)
    cube = boundary_mode == "cube"
    N, H, W = uv.shape[:3]
    C = tex.shape[-1]
    if filter_mode == "auto":
        filter_mode = "linear" if uv_da is None and bias is None else "linear-mipmap-linear"
    levels = [tex]
    if filter_mode.startswith("linear-mipmap") and max_mip_level != 0:
        chain = mip_chain(tex) if mip is None else [np.asarray(m, np.float64) for m in mip]
        levels += chain[:max_mip_level] if max_mip_level is not None else chain
    uvf = uv.reshape(-1, uv.shape[-1])
    P = len(uvf)
    n = np.repeat(np.arange(N), H * W) if tex.shape[0] > 1 else np.zeros(P, np.int64)

    def sample(level_index, nearest=False):
        lv = levels[level_index]
        if cube:
            return sample_cube(lv, n, uvf, nearest)
        return sample_2d(lv, n, uvf[:, 0], uvf[:, 1], boundary_mode, nearest)

    if filter_mode in ("nearest", "linear") or len(levels) == 1:
        out = sample(0, nearest=filter_mode == "nearest")
    else:
        lod = level_of_detail(
            tex.shape,
            uvf,
            None if uv_da is None else uv_da.reshape(P, -1),
            None if bias is None else bias.reshape(P),
            len(levels),
            cube,
        )
        if filter_mode == "linear-mipmap-nearest":
            pick = np.floor(lod).astype(np.int64)
            out = np.zeros((P, C))
            for k in range(len(levels)):
                out[pick == k] = sample(k)[pick == k]
        else:
            l0 = np.floor(lod).astype(np.int64)
            f = (lod - l0)[:, None]
            out = np.zeros((P, C))
            for k in range(len(levels)):
                sel = l0 == k
                if sel.any():
                    upper = sample(min(k + 1, len(levels) - 1))
                    out[sel] = ((1 - f) * sample(k) + f * upper)[sel]
    if cube:  # zero-length or non-finite directions read nothing
        bad = ~np.isfinite(uvf).all(-1) | (np.abs(uvf).max(-1) == 0)
        out[bad] = 0
    return out.reshape(N, H, W, C)
