"""A NumPy model of the rasterizer's exact float32 arithmetic, for bit-for-bit comparisons.

tests/support/reference.py models the geometry in float64 and tolerates rounding near edges. This model instead
repeats, operation by operation, the float32 and float64 arithmetic that csrc/core/rasterize.h specifies
(each vertex scaled by its own power of two, triangle setup, the clipped bounding box, edge functions, the
double-precision re-decision near an edge, the tie rules, weighted barycentrics with their double-precision
fallback, z/w and the derivatives), one triangle at a time over its whole bounding box, with a straightforward
depth test. Any rasterizer that follows that arithmetic must match it bit for bit, whatever its
binning, tiling, vectorisation or thread count.
"""

import math

import numpy as np

f32 = np.float32


def _c_int(x):
    """(int)x as x86-64 converts float to int32: truncation, and INT_MIN when out of range or NaN."""
    if not math.isfinite(float(x)) or not -(2.0**31) <= math.trunc(float(x)) < 2.0**31:
        return -(2**31)
    return math.trunc(float(x))


def _wrap32(i):
    return (i + 2**31) % 2**32 - 2**31  # the build uses -fwrapv


def _clamp(x, lo, hi):
    return lo if x < lo else (hi if x > hi else x)


def _fmin(a, b):
    return b if math.isnan(a) else (a if math.isnan(b) else min(a, b))


def _fmax(a, b):
    return b if math.isnan(a) else (a if math.isnan(b) else max(a, b))


def clipped_pixel_bbox(p, W, H):
    """clipped_pixel_bbox of rasterize.h: p is [3, 4] float32; returns (x0, y0, x1, y1) or None.

    Always with a pixel of margin, as rasterize.h gives only clipped triangles: its tighter box for unclipped ones
    (the centres within the projected hull) only saves work, and a model drawing the larger box proves it drops no
    covered centre, vertices and edges on pixel centres included."""
    poly = [list(p[i]) for i in range(3)]
    for sz in (f32(1), f32(-1)):
        out = []
        n = len(poly)
        for i in range(n):
            A, B = poly[i], poly[(i + 1) % n]
            da, db = A[3] + sz * A[2], B[3] + sz * B[2]
            if da >= 0:
                out.append(list(A))
            if (da >= 0) != (db >= 0):
                t = da / (da - db)
                out.append([A[k] + t * (B[k] - A[k]) for k in range(4)])
        poly = out
        if not poly:
            return None
    lo_x = lo_y = f32(3.0e38)
    hi_x = hi_y = f32(-3.0e38)
    for P in poly:
        if not P[3] > f32(1e-30):
            lo_x = lo_y = f32(-3.0e38)
            hi_x = hi_y = f32(3.0e38)
            break
        X = (P[0] / P[3] + f32(1)) * f32(0.5) * f32(W) - f32(0.5)
        Y = (P[1] / P[3] + f32(1)) * f32(0.5) * f32(H) - f32(0.5)
        if np.isnan(X) or np.isnan(Y):
            return None
        lo_x, hi_x = f32(_fmin(lo_x, X)), f32(_fmax(hi_x, X))
        lo_y, hi_y = f32(_fmin(lo_y, Y)), f32(_fmax(hi_y, Y))
    lo_x, lo_y = f32(_fmax(lo_x, f32(-2))), f32(_fmax(lo_y, f32(-2)))
    hi_x, hi_y = f32(_fmin(hi_x, f32(W) + f32(1))), f32(_fmin(hi_y, f32(H) + f32(1)))
    x0 = _clamp(_wrap32(_c_int(np.floor(lo_x)) - 1), 0, W)
    x1 = _clamp(_wrap32(_c_int(np.ceil(hi_x)) + 1), -1, W - 1)
    y0 = _clamp(_wrap32(_c_int(np.floor(lo_y)) - 1), 0, H)
    y1 = _clamp(_wrap32(_c_int(np.ceil(hi_y)) + 1), -1, H - 1)
    return (x0, y0, x1, y1) if x0 <= x1 and y0 <= y1 else None


def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def normalise_vertices(p):
    """normalise_vertices of rasterize.h: (p [3, 4] float32 with each row scaled by 2^-e, e [3])."""
    out, es = np.zeros((3, 4), np.float32), []
    for i in range(3):
        m = np.abs(p[i]).max()
        e = int(np.frexp(m)[1]) - 1 if m > 0 else 0
        out[i] = [f32(float(x) * 2.0**-e) for x in p[i]]
        es.append(e)
    return out, es


def tri_setup(p, W, H):
    """tri_setup of rasterize.h for p [3, 4] float32: a dict of the setup, or None if it draws nothing."""
    if not np.all(np.isfinite(p)):
        return None
    p, e = normalise_vertices(np.asarray(p, np.float32))
    v = [[f32(p[i, 0]), f32(p[i, 1]), f32(p[i, 3])] for i in range(3)]
    d64 = [[float(x) for x in vi] for vi in v]
    d = (
        d64[0][0] * (d64[1][1] * d64[2][2] - d64[1][2] * d64[2][1])
        - d64[0][1] * (d64[1][0] * d64[2][2] - d64[1][2] * d64[2][0])
        + d64[0][2] * (d64[1][0] * d64[2][1] - d64[1][1] * d64[2][0])
    )
    n = [math.sqrt(float(_dot(vi, vi))) for vi in v]
    if not abs(d) > 1e-14 * n[0] * n[1] * n[2]:
        return None
    sg = f32(1) if d > 0 else f32(-1)
    bw_exp = [ei - min(e) for ei in e]
    s = {"a": [], "b": [], "c": [], "tol": [], "v": v, "sg": sg, "bw_exp": bw_exp, "bw": [f32(2.0**-k) for k in bw_exp]}
    with np.errstate(over="ignore", invalid="ignore"):
        inv = 1.0 / abs(d)
        s["z"] = [f32(float(p[i, 2]) * inv) for i in range(3)]
    if not all(np.isfinite(z) for z in s["z"]):
        return None
    box = clipped_pixel_bbox(p.astype(np.float32), W, H)
    if box is None:
        return None
    # set_edge_origin about vertex 0 on screen (clamped to the NDC square; the NDC origin if w <= 0): rows in
    # double (exact products), rounded once.
    front = v[0][2] > 0
    ox = min(max(v[0][0] / v[0][2], f32(-1)), f32(1)) if front else f32(0)
    oy = min(max(v[0][1] / v[0][2], f32(-1)), f32(1)) if front else f32(0)
    s["ox"], s["oy"] = ox, oy
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(3):
            P, Q = d64[(i + 1) % 3], d64[(i + 2) % 3]
            ra, rb, rc = P[1] * Q[2] - P[2] * Q[1], P[2] * Q[0] - P[0] * Q[2], P[0] * Q[1] - P[1] * Q[0]
            a, b = f32(float(sg) * ra), f32(float(sg) * rb)
            c = f32(float(sg) * ((ra * float(ox) + rb * float(oy)) + rc))
            if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c)):
                return None
            mag = (
                abs(P[1] * Q[2])
                + abs(P[2] * Q[1])
                + abs(P[2] * Q[0])
                + abs(P[0] * Q[2])
                + abs(P[0] * Q[1])
                + abs(P[1] * Q[0])
            )
            size = 2.0 * float(abs(a)) + 2.0 * float(abs(b)) + float(abs(c))
            s["a"].append(a), s["b"].append(b), s["c"].append(c)
            s["tol"].append(f32(2.0**-20 * size + 2.0**-46 * mag + 2.0**-120))
    s["box"] = box
    return s


def pixel_center_ndc(i, size):
    return np.asarray(2 * i + 1).astype(np.float32) / f32(size) - f32(1)


def _edges(s, px, py):
    dx, dy = px - s["ox"], py - s["oy"]
    return [(s["a"][i] * dx + s["b"][i] * dy) + s["c"][i] for i in range(3)]


def _attrs(s, px, py, W, H):
    """frag_attrs: (u, v) and (du/dX, du/dY, dv/dX, dv/dY) of a drawn pixel, float32 or the double fallback."""
    iv = [x if x > 0 else f32(0) for x in _edges(s, px, py)]
    bw = s["bw"]
    if (bw[0] * iv[0] + bw[1] * iv[1]) + bw[2] * iv[2] >= f32(2.0**-60):
        T, w, out = f32, bw, f32
    else:  # Python floats are doubles
        T, w, out = float, [2.0**-k for k in s["bw_exp"]], f32
    L = [w[i] * T(iv[i]) for i in range(3)]
    A = [w[i] * T(s["a"][i]) for i in range(3)]
    B = [w[i] * T(s["b"][i]) for i in range(3)]
    S = (L[0] + L[1]) + L[2]
    Sa, Sb = (A[0] + A[1]) + A[2], (B[0] + B[1]) + B[2]
    kx, ky = T(2) / T(W) / (S * S), T(2) / T(H) / (S * S)
    return (
        [out(L[0] / S), out(L[1] / S)],
        [
            out(kx * (A[0] * S - L[0] * Sa)),
            out(ky * (B[0] * S - L[0] * Sb)),
            out(kx * (A[1] * S - L[1] * Sa)),
            out(ky * (B[1] * S - L[1] * Sb)),
        ],
    )


def _inside(s, i, l, px, py):
    """edge_test over arrays: the float sign far from 0, else the double re-evaluation and the tie rule."""
    P, Q = s["v"][(i + 1) % 3], s["v"][(i + 2) % 3]
    ra = float(P[1]) * float(Q[2]) - float(P[2]) * float(Q[1])
    rb = float(P[2]) * float(Q[0]) - float(P[0]) * float(Q[2])
    rc = float(P[0]) * float(Q[1]) - float(P[1]) * float(Q[0])
    sg = float(s["sg"])
    ld = sg * (((ra * px.astype(np.float64)) + (rb * py.astype(np.float64))) + rc)
    a, b = sg * ra, sg * rb
    tie = a > 0.0 or (a == 0.0 and b > 0.0)
    exact = (ld > 0.0) | ((ld == 0.0) & tie)
    far = np.abs(l) > s["tol"][i]
    return np.where(far, l > 0, exact)


def rasterize(pos, tri, H, W):
    """(rast, rast_db) [N, H, W, 4] float32 for instanced pos [N, V, 4], tri [T, 3], as the op computes them."""
    pos = np.asarray(pos, np.float32)
    tri = np.asarray(tri)
    N = pos.shape[0]
    rast = np.zeros((N, H, W, 4), np.float32)
    db = np.zeros((N, H, W, 4), np.float32)
    with np.errstate(all="ignore"):
        for n in range(N):
            best_z = np.zeros((H, W), np.float32)
            best_id = np.zeros((H, W), np.int64)
            setups = {}
            for t in range(len(tri)):
                s = tri_setup(pos[n, tri[t]], W, H)
                if s is None:
                    continue
                setups[t + 1] = s
                x0, y0, x1, y1 = s["box"]
                px, py = np.meshgrid(
                    pixel_center_ndc(np.arange(x0, x1 + 1), W), pixel_center_ndc(np.arange(y0, y1 + 1), H)
                )
                l = _edges(s, px, py)
                ok = _inside(s, 0, l[0], px, py) & _inside(s, 1, l[1], px, py) & _inside(s, 2, l[2], px, py)
                S = (l[0] + l[1]) + l[2]
                zw = (l[0] * s["z"][0] + l[1] * s["z"][1]) + l[2] * s["z"][2]
                ok &= (S > 0) & (zw >= -1) & (zw <= 1)
                bz, bid = best_z[y0 : y1 + 1, x0 : x1 + 1], best_id[y0 : y1 + 1, x0 : x1 + 1]
                take = ok & ((bid == 0) | (zw < bz) | ((zw == bz) & (t + 1 < bid)))
                bz[take], bid[take] = zw[take], t + 1
            for y, x in zip(*np.nonzero(best_id)):
                s = setups[best_id[y, x]]
                uv, db[n, y, x] = _attrs(s, pixel_center_ndc(x, W), pixel_center_ndc(y, H), W, H)
                rast[n, y, x] = [uv[0], uv[1], best_z[y, x], f32(best_id[y, x])]
    return rast, db
