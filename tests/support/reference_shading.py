"""Independent NumPy models of interpolate and antialias, in float64.

The antialias model works in projected 2D pixel coordinates (so it assumes every vertex has w > 0): it
intersects the segment between two pixel centres with the front triangle's edges as 2D segments, looks up
neighbouring triangles in a dict keyed by vertex pairs, and compares 2D orientations. The plugin instead uses
homogeneous edge functions and a sorted half-edge table; the two agree wherever the geometry is not within
rounding distance of a decision, which `antialias` reports as `margin`.

Both follow one direction rule: a horizontal pixel pair considers only edges closer to vertical than to
horizontal on screen (|dy| >= |dx| in pixels), a vertical pair only the others, so each crossing is blended once.
"""

import numpy as np


def interpolate(attr, rast, tri, rast_db=None, diff=()):
    """out [N,H,W,A] and out_da [N,H,W,2*len(diff)] (the latter only with rast_db)."""
    attr, rast = np.asarray(attr, np.float64), np.asarray(rast, np.float64)
    tri = np.asarray(tri, np.int64)
    N, H, W, _ = rast.shape
    A = attr.shape[-1]
    out = np.zeros((N, H, W, A))
    out_da = np.zeros((N, H, W, 2 * len(diff) if rast_db is not None else 0))
    for n in range(N):
        block = attr if attr.ndim == 2 else attr[n if attr.shape[0] > 1 else 0]
        ids = rast[n, ..., 3].astype(np.int64)
        ys, xs = np.nonzero(ids > 0)
        for y, x in zip(ys, xs):
            a0, a1, a2 = block[tri[ids[y, x] - 1]]
            u, v = rast[n, y, x, :2]
            out[n, y, x] = u * a0 + v * a1 + (1 - u - v) * a2
            if rast_db is not None:
                dudx, dudy, dvdx, dvdy = np.asarray(rast_db, np.float64)[n, y, x]
                for k, c in enumerate(diff):
                    out_da[n, y, x, 2 * k] = (a0[c] - a2[c]) * dudx + (a1[c] - a2[c]) * dvdx
                    out_da[n, y, x, 2 * k + 1] = (a0[c] - a2[c]) * dudy + (a1[c] - a2[c]) * dvdy
    return out, out_da


def _cross2(a, b):
    return a[0] * b[1] - a[1] * b[0]


def _neighbours(tri):
    """{(lo, hi): [(triangle, third vertex), ...]} for every edge of tri."""
    table = {}
    for t, (a, b, c) in enumerate(np.asarray(tri, np.int64)):
        for i, j, k in ((a, b, c), (b, c, a), (c, a, b)):
            table.setdefault((min(i, j), max(i, j)), []).append((t, k))
    return table


def antialias(color, rast, pos, tri):
    """Returns (out, pairs). pairs: a dict (n, p, q, blended, margin) for every pair of pixels showing different
    IDs whose segment some edge line of the front triangle crosses, where p, q are (y, x) and margin is how far
    the decisions were from flipping (in pixels or edge parameter units); blended pairs also have t (the crossing
    from the front pixel), target, source, tri and edge."""
    color, rast, pos = (np.asarray(a, np.float64) for a in (color, rast, pos))
    tri = np.asarray(tri, np.int64)
    N, H, W, _ = color.shape
    out = color.copy()
    adj = _neighbours(tri)
    pairs = []
    for n in range(N):
        p_img = pos if pos.ndim == 2 else pos[n]
        screen = np.stack(
            [(p_img[:, 0] / p_img[:, 3] + 1) * W / 2 - 0.5, (p_img[:, 1] / p_img[:, 3] + 1) * H / 2 - 0.5], -1
        )  # pixel (x, y) centre at (x, y)
        for y in range(H):
            for x in range(W):
                for q in ((y, x + 1), (y + 1, x)):
                    if q[0] >= H or q[1] >= W:
                        continue
                    pr = _pair(color[n], rast[n], screen, tri, adj, (y, x), q)
                    if pr is None:
                        continue
                    pairs.append(dict(pr, n=n))
                    if pr["blended"]:
                        target, source, alpha = pr["target"], pr["source"], abs(pr["t"] - 0.5)
                        out[n][target] += alpha * (color[n][source] - color[n][target])
    return out, pairs


def _pair(color, rast, screen, tri, adj, p, q):
    """The pair (p, q) of pixels showing different IDs: a dict with `blended` and the `margin` of the decisions
    that made it so (also for a pair left alone where some edge crosses it), or None."""
    ida, idb = int(rast[p][3]), int(rast[q][3])
    if ida == idb:
        return None
    za = rast[p][2] if ida else np.inf
    zb = rast[q][2] if idb else np.inf
    p_front = (za, ida or np.inf) < (zb, idb or np.inf)
    front, back = (p, q) if p_front else (q, p)
    f = int(rast[front][3]) - 1
    P = np.array(front[::-1], np.float64)  # (x, y)
    D = np.array(back[::-1], np.float64) - P
    horizontal = p[0] == q[0]
    crossed = []  # (t, s, a, b, c, of this pair's direction) for each edge line crossed within the segment
    margin = np.inf
    for i in range(3):
        a, b, c = tri[f][(i + 1) % 3], tri[f][(i + 2) % 3], tri[f][i]
        A, B = screen[a], screen[b]
        E = B - A
        den = _cross2(D, E)
        if den == 0:
            continue
        t = _cross2(A - P, E) / den  # P + t D on the line through A, B
        s = _cross2(A - P, D) / den  # A + s E on the segment P -> P + D
        if not 0 <= t <= 1:
            continue
        crossed.append((t, s, a, b, c, (abs(E[1]) >= abs(E[0])) == horizontal))
        # Flipping decisions: which side of the line P_B is on (t near 1), whether the crossing is past a vertex
        # (s near 0 or 1) and which direction the edge faces (near 45 degrees: ||Ey| - |Ex|| / |E| is sqrt(2)
        # times the sine of the angle from 45 degrees).
        margin = min(margin, 1 - t, abs(s), abs(1 - s), abs(abs(E[1]) - abs(E[0])) / max(np.linalg.norm(E), 1e-30))
    # The segment leaves F where it crosses an edge within the edge's extent; the pair resolves that crossing only
    # if the edge is of its direction (a horizontal pair: |dy| >= |dx|), else the other direction's pairs do.
    exits = [e for e in crossed if 0 <= e[1] <= 1 and e[5]]
    if not exits:
        # past_exit: an edge of this direction is crossed, but only after the segment left F through another.
        return dict(p=p, q=q, blended=False, margin=margin, past_exit=any(e[5] for e in crossed)) if crossed else None
    t, s, a, b, c, _ = min(exits)
    A, E = screen[a], screen[b] - screen[a]
    own = _cross2(E, screen[c] - A)
    margin = min(margin, abs(t - 0.5), t)
    continues = False
    for g, m in adj[(min(a, b), max(a, b))]:
        if g == f:
            continue
        other = _cross2(E, screen[m] - A)
        margin = min(margin, abs(other) / max(np.linalg.norm(E), 1e-30))
        continues |= other * own < 0
    if continues:
        return dict(p=p, q=q, blended=False, margin=margin, past_exit=False)
    target_is_back = t > 0.5
    target, source = (back, front) if target_is_back else (front, back)
    return dict(p=p, q=q, t=t, target=target, source=source, margin=margin, tri=f, edge=(a, b), blended=True)


def half_plane_coverage(height, width, inside, line):
    """Expected antialias output (per pixel, the blend weight of the 'inside' colour) for an image split by a
    straight line into an inside and an outside region of constant colour, from the exact crossings of the
    line with every segment joining neighbouring pixel centres. line(x, y) > 0 inside, linear in pixel
    coordinates; inside: bool [H, W] of which centres are inside (as rasterized). The line is crossed by the
    pairs of one direction only: horizontal ones if it is closer to vertical (|dy| >= |dx|), else vertical ones."""
    cov = inside.astype(np.float64)
    gx, gy = line(1.0, 0.0) - line(0.0, 0.0), line(0.0, 1.0) - line(0.0, 0.0)  # the line's gradient
    steps = ((0, 1),) if abs(gx) >= abs(gy) else ((1, 0),)
    for y in range(height):
        for x in range(width):
            for y2, x2 in ((y + dy, x + dx) for dy, dx in steps):
                if y2 >= height or x2 >= width or inside[y, x] == inside[y2, x2]:
                    continue
                (fy, fx), (by, bx) = ((y, x), (y2, x2)) if inside[y, x] else ((y2, x2), (y, x))
                lf, lb = line(fx, fy), line(bx, by)
                t = lf / (lf - lb)
                if t > 0.5:
                    cov[by, bx] += t - 0.5  # the inside surface reaches into the outside pixel
                else:
                    cov[fy, fx] -= 0.5 - t  # the outside reaches into the inside pixel
    return cov
