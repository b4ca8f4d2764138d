// Rasterization math shared by the CPU loops and the CUDA kernels.
//
// Triangles are rasterized in 2D homogeneous coordinates: for the 3x3 matrix M whose columns are the vertices'
// (x, y, w), the adjugate rows r_i give edge functions lambda_i(px, py) = r_i . (px, py, 1). A pixel centre is
// inside when all three lambda_i (normalised by sign(det M)) are >= 0 and their sum is > 0, which is exactly
// "inside the triangle and w > 0". Triangles crossing w = 0 therefore need no geometric clipping; the only
// clipping done is for the bounding box. Each triangle evaluates its edge functions in float about a point of its
// own (set_edge_origin), for precision; a value within its rounding bound of 0 is re-decided in double from the
// exact rows about the NDC origin (edge_test). There, r_i of a shared edge is bit-for-bit the negation of the
// neighbour's, so a top-left style tie rule gives watertight, non-overlapping coverage along shared edges.
//
// Positions are homogeneous: s * (x, y, z, w) is the same point for any s > 0. Before any of this math, every
// vertex is scaled by its own power of two 2^-e, chosen so that its largest |component| lies in [1, 2)
// (normalise_vertices). That is exact (only the exponent changes) and depends on the vertex alone, not on the
// triangle using it, so shared edges still get bit-for-bit negated rows; no product of components can
// overflow or underflow, whatever the positions' range; and positions scaled by any power of two rasterize to
// the same bits. Coverage and z/w depend on the points alone and come straight from the normalised vertices.
// The barycentrics (u, v) do depend on each vertex's scale (perspective-correct interpolation weighs a vertex
// by 1/w): they are the normalised vertices' barycentrics weighted by bw_i = 2^(min e - e_i). Gradients are
// taken with respect to the normalised vertices and scaled by 2^-e_i (the chain rule of the scaling).
#pragma once

#include "common.h"

namespace prerast {

constexpr int kTile = 16;  // pixels per tile side; one CUDA block of kTile*kTile threads
constexpr int64_t kMaxTriangles = (int64_t)kMaxEncodedTriangleId + 1;  // every ID fits rast (common.h)
constexpr int64_t kRangeImagesPerCall = 256;  // range mode: images per core call (the CUDA path's kernel argument)

// Everything needed to evaluate one (image, triangle) work item at a pixel.
struct TriSetup {
  float a[3], b[3], c[3];  // lambda_i = a_i (px - ox) + b_i (py - oy) + c_i, sign-normalised: inside means >= 0
  float ox, oy;            // the NDC point the edge functions are taken about (set_edge_origin)
  float tol[3];            // bound on the float rounding of lambda_i: closer to 0 is re-decided in double
  float v[3][3];           // the vertices' (x, y, w), for that double-precision re-evaluation
  float sg;                // sign(det M)
  float z[3];              // clip-space z of the vertices divided by |det M|, so z/w = sum(lambda_i z_i)
  float bw[3];             // barycentric weights of the vertices' scales (barycentric_weights)
  int16_t bw_exp[3];       // bw_i = 2^-bw_exp[i], kept for the double-precision fallback where bw_i underflows
  int32_t tri;             // index into tri (the ID written is tri + 1)
  int32_t x0, y0, x1, y1;  // inclusive pixel bounding box; x0 > x1 when the item draws nothing
};

struct RasterArgs {
  const float* pos = nullptr;       // instanced: [N, V, 4]; range mode: [V, 4]
  const int32_t* tri = nullptr;     // [T, 3], indices already validated to lie in [0, V)
  const int32_t* ranges = nullptr;  // host [N, 2] (first, count); null selects instanced mode
  int64_t num_images = 0, num_vertices = 0, num_triangles = 0;
  int height = 0, width = 0;
  const float* peel_prev = nullptr;  // [N, H, W, 4] previous depth layer, or null
  float* rast = nullptr;             // [N, H, W, 4] out
  float* rast_db = nullptr;          // [N, H, W, 4] out, or null
};

struct RasterGradArgs {
  const float* pos = nullptr;
  const int32_t* tri = nullptr;
  bool instanced = true;
  int64_t num_images = 0, num_vertices = 0, num_triangles = 0;
  int height = 0, width = 0;
  const float* rast = nullptr;       // forward output
  const float* grad_rast = nullptr;  // [N, H, W, 4]
  const float* grad_db = nullptr;    // [N, H, W, 4] or null
  float* grad_pos = nullptr;         // shaped like pos, zero-initialised
};

// --- triangle setup ---------------------------------------------------------------------------------------

// A triangle's vertices, each scaled by its own power of two 2^-e[i] (see the top of this file).
struct NormTri {
  float p[3][4];
  int e[3];
};

PR_HD void normalise_vertices(const float* p0, const float* p1, const float* p2, NormTri& n) {
  const float* p[3] = {p0, p1, p2};
  for (int i = 0; i < 3; ++i) {
    n.e[i] = normalising_exponent(p[i], 4);
    for (int k = 0; k < 4; ++k) n.p[i][k] = scale_pow2(p[i][k], -n.e[i]);
  }
}

// The weights that turn the normalised vertices' barycentrics back into the original vertices' (up to a common
// factor): vertex i was scaled by 2^-e_i, so its barycentric weighs 2^-e_i relative to the others. Taken
// relative to the smallest e, bw_i = 2^-(e_i - e_min) is at most 1 (it underflows only for vertices whose
// scales differ by more than 2^126).
PR_HD void barycentric_weights(const int e[3], float bw[3], int16_t bw_exp[3]) {
  int lo = e[0] < e[1] ? e[0] : e[1];
  lo = lo < e[2] ? lo : e[2];
  for (int i = 0; i < 3; ++i) {
    bw_exp[i] = (int16_t)(e[i] - lo);  // at most 127 + 149
    bw[i] = (float)pow2d(lo - e[i]);
  }
}

// Clip the triangle against -w <= z <= w (which implies w >= 0) and return the pixel bounding box of what
// remains. Returns false if nothing remains.
PR_HD bool clipped_pixel_bbox(const float* p[3], int W, int H, int& x0, int& y0, int& x1, int& y1) {
  float poly[2][9][4];
  const float* v[9] = {p[0], p[1], p[2]};  // the clipped polygon's vertices
  int n = 3;
  // Every vertex inside both planes (most triangles): each clip pass would copy the three vertices unchanged.
  bool inside = true;
  for (int i = 0; i < 3; ++i) inside = inside && p[i][3] + p[i][2] >= 0 && p[i][3] - p[i][2] >= 0;
  int cur = 0;
  if (!inside)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 4; ++k) poly[0][i][k] = p[i][k];
  for (int plane = 0; plane < 2 && !inside; ++plane) {
    const float sz = plane == 0 ? 1.0f : -1.0f;  // distance = w + sz * z
    int m = 0;
    for (int i = 0; i < n; ++i) {
      const float* A = poly[cur][i];
      const float* B = poly[cur][(i + 1) % n];
      float da = A[3] + sz * A[2], db = B[3] + sz * B[2];
      if (da >= 0) {
        for (int k = 0; k < 4; ++k) poly[cur ^ 1][m][k] = A[k];
        ++m;
      }
      if ((da >= 0) != (db >= 0)) {
        float t = da / (da - db);
        for (int k = 0; k < 4; ++k) poly[cur ^ 1][m][k] = A[k] + t * (B[k] - A[k]);
        ++m;
      }
    }
    n = m;
    cur ^= 1;
    if (n == 0) return false;
    for (int i = 0; i < n; ++i) v[i] = poly[cur][i];
  }
  float lo_x = 3.0e38f, lo_y = 3.0e38f, hi_x = -3.0e38f, hi_y = -3.0e38f;
  for (int i = 0; i < n; ++i) {
    const float* P = v[i];
    if (!(P[3] > 1e-30f)) {  // a vertex on the eye plane: the projection is unbounded
      lo_x = lo_y = -3.0e38f;
      hi_x = hi_y = 3.0e38f;
      break;
    }
    float X = (P[0] / P[3] + 1.0f) * 0.5f * (float)W - 0.5f;  // pixel-index space: centre of pixel i is i
    float Y = (P[1] / P[3] + 1.0f) * 0.5f * (float)H - 0.5f;
    if (!(X == X) || !(Y == Y)) return false;
    // fminf and fmaxf, X and Y not being NaN (a signed zero may differ, which floorf and ceilf below do not see):
    // the host compiler makes those calls into the maths library.
    lo_x = X < lo_x ? X : lo_x, hi_x = X > hi_x ? X : hi_x;
    lo_y = Y < lo_y ? Y : lo_y, hi_y = Y > hi_y ? Y : hi_y;
  }
  // Both ends clamped on both sides: an off-screen box must not reach the int conversion out of its range.
  const auto clamp = [](float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); };  // x not NaN
  lo_x = clamp(lo_x, -2.0f, (float)W + 1.0f), lo_y = clamp(lo_y, -2.0f, (float)H + 1.0f);
  hi_x = clamp(hi_x, -2.0f, (float)W + 1.0f), hi_y = clamp(hi_y, -2.0f, (float)H + 1.0f);
  if (!inside) {
    // One pixel of margin absorbs the rounding of the clip and the projection; coverage itself is decided by
    // the edge functions.
    x0 = clampi((int)floorf(lo_x) - 1, 0, W), x1 = clampi((int)ceilf(hi_x) + 1, -1, W - 1);
    y0 = clampi((int)floorf(lo_y) - 1, 0, H), y1 = clampi((int)ceilf(hi_y) + 1, -1, H - 1);
    return x0 <= x1 && y0 <= y1;
  }
  // Unclipped, in front of the camera: what the edge functions cover lies in the hull of the projected vertices,
  // and the box is the pixel centres within it. Where a box end matters (within the screen, |X| <= W + 2), the
  // projection's few roundings are each at most an ulp of W + 2: a margin of 2^-16 (W + 2) covers them many times
  // over, and leaves out the centres that a pixel of margin would put in the box of a small triangle (most of
  // those of a 1M-triangle mesh, whose boxes then hold no centre at all).
  const float mx = 0x1p-16f * ((float)W + 2.0f), my = 0x1p-16f * ((float)H + 2.0f);
  x0 = clampi((int)ceilf(lo_x - mx), 0, W), x1 = clampi((int)floorf(hi_x + mx), -1, W - 1);
  y0 = clampi((int)ceilf(lo_y - my), 0, H), y1 = clampi((int)floorf(hi_y + my), -1, H - 1);
  return x0 <= x1 && y0 <= y1;
}

// Row i of the adjugate of M, r_i = v_j x v_k (not sign-normalised), in double: the products of floats are exact
// there, so the rows of a shared edge are exact negations of each other.
PR_HD void exact_row(const TriSetup& s, int i, double& ra, double& rb, double& rc) {
  const float* p = s.v[(i + 1) % 3];
  const float* q = s.v[(i + 2) % 3];
  ra = (double)p[1] * q[2] - (double)p[2] * q[1];
  rb = (double)p[2] * q[0] - (double)p[0] * q[2];
  rc = (double)p[0] * q[1] - (double)p[1] * q[0];
}

// The edge functions of s taken about the NDC point (ox, oy), |ox|, |oy| <= 1: a_i and b_i are the rounded rows and
// c_i the value at (ox, oy), both computed in double. About a point near the triangle, an edge value is a sum of
// products of the triangle's own size; taken about the NDC origin it would be the difference of products near 1,
// whose float rounding for a triangle a few pixels across at 4096^2 (edge values near 1e-6) is percents of its
// barycentrics and depth. Returns false if a row is not finite. Without `tolerances` (the backward), tol is left.
PR_HD bool set_edge_origin(TriSetup& s, float ox, float oy, bool tolerances = true) {
  s.ox = ox, s.oy = oy;
  for (int i = 0; i < 3; ++i) {
    double ra, rb, rc;
    exact_row(s, i, ra, rb, rc);
    s.a[i] = (float)(s.sg * ra), s.b[i] = (float)(s.sg * rb);
    s.c[i] = (float)(s.sg * ((ra * ox + rb * oy) + rc));
    if (!isfinite(s.a[i]) || !isfinite(s.b[i]) || !isfinite(s.c[i])) return false;
    if (!tolerances) continue;
    // edge_eval against edge_test's double value, for pixel centres (|px|, |py| <= 1, so |px - ox| <= 2):
    // rounding the entries and px - ox, and the float evaluation, come to under 5 * 2^-24 of
    // 2|a| + 2|b| + |c|; the double values are off by a few 2^-53 of the products' magnitudes. tol is over
    // three times the first bound and far over the second, with a floor for subnormal values.
    const float* p = s.v[(i + 1) % 3];
    const float* q = s.v[(i + 2) % 3];
    const double mag = fabs((double)p[1] * q[2]) + fabs((double)p[2] * q[1]) + fabs((double)p[2] * q[0]) +
                       fabs((double)p[0] * q[2]) + fabs((double)p[0] * q[1]) + fabs((double)p[1] * q[0]);
    const double size = 2.0 * fabsf(s.a[i]) + 2.0 * fabsf(s.b[i]) + fabsf(s.c[i]);
    s.tol[i] = (float)(0x1p-20 * size + 0x1p-46 * mag + 0x1p-120);
  }
  return true;
}

// Fills the edge functions of s (v, sg, bw, then a, b, c, tol about vertex 0's projection: set_edge_origin) for
// the normalised vertices n, and d = det M of those; returns false if the triangle can draw nothing for being
// degenerate in homogeneous space (zero area on screen) or too large for float rows.
PR_HD bool tri_edge_setup_normalised(const NormTri& n, TriSetup& s, double& d, bool tolerances = true) {
  barycentric_weights(n.e, s.bw, s.bw_exp);
  const float *q0 = n.p[0], *q1 = n.p[1], *q2 = n.p[2];
  V3 v0{q0[0], q0[1], q0[3]}, v1{q1[0], q1[1], q1[3]}, v2{q2[0], q2[1], q2[3]};
  // The determinant decides orientation and degeneracy; double keeps that decision stable.
  d = (double)v0.x * ((double)v1.y * v2.z - (double)v1.z * v2.y) -
      (double)v0.y * ((double)v1.x * v2.z - (double)v1.z * v2.x) +
      (double)v0.z * ((double)v1.x * v2.y - (double)v1.y * v2.x);
  double n0 = sqrt((double)dot3(v0, v0)), n1 = sqrt((double)dot3(v1, v1)), n2 = sqrt((double)dot3(v2, v2));
  if (!(fabs(d) > 1e-14 * n0 * n1 * n2)) return false;
  s.sg = d > 0 ? 1.0f : -1.0f;
  const V3 vs[3] = {v0, v1, v2};
  for (int i = 0; i < 3; ++i) s.v[i][0] = vs[i].x, s.v[i][1] = vs[i].y, s.v[i][2] = vs[i].z;
  // About vertex 0 on screen, within the NDC square (every pixel centre then lies within 2 of it), or about the
  // NDC origin where vertex 0 is not in front of the camera (such a triangle is not small on screen).
  // The clamp is fminf(fmaxf(q, -1), 1) for a q that is never NaN (finite over positive), in comparisons: the host
  // compiler makes fminf and fmaxf calls into the maths library.
  const bool front = v0.z > 0.0f;
  const auto unit = [](float q) { return q < -1.0f ? -1.0f : (q > 1.0f ? 1.0f : q); };
  return set_edge_origin(s, front ? unit(v0.x / v0.z) : 0.0f, front ? unit(v0.y / v0.z) : 0.0f, tolerances);
}

// tri_edge_setup_normalised for vertices p0..2, n receiving them normalised; false also where one is not finite.
// Antialiasing evaluates the rasterizer's coverage with this alone, and the backward takes its rows from it.
PR_HD bool tri_edge_setup(const float* p0, const float* p1, const float* p2, TriSetup& s, double& d, NormTri& n,
                          bool tolerances = true) {
  if (!finite4(p0) || !finite4(p1) || !finite4(p2)) return false;
  normalise_vertices(p0, p1, p2, n);
  return tri_edge_setup_normalised(n, s, d, tolerances);
}

// Fills s for triangle `t` with vertices p[0..2]; returns false (and an empty box) if it can draw nothing:
// non-finite input, degenerate in homogeneous space (zero area on screen), or wholly outside -w <= z <= w.
PR_HD bool tri_setup(const float* p0, const float* p1, const float* p2, int32_t t, int W, int H, TriSetup& s) {
  s.tri = t;
  s.x0 = 1, s.x1 = 0, s.y0 = 1, s.y1 = 0;
  if (!finite4(p0) || !finite4(p1) || !finite4(p2)) return false;
  NormTri n;
  normalise_vertices(p0, p1, p2, n);
  // The box first: it is a fraction of the edge setup's cost, and a small triangle's box often holds no pixel
  // centre (it then draws nothing whatever its edges).
  const float* p[3] = {n.p[0], n.p[1], n.p[2]};
  int x0, y0, x1, y1;
  if (!clipped_pixel_bbox(p, W, H, x0, y0, x1, y1)) return false;
  double d;
  if (!tri_edge_setup_normalised(n, s, d)) return false;
  // z/w = sum(lambda_i z_i) for lambda = M^-1 q; the edge functions are |det| * lambda, so fold 1/|det| into z.
  // (Per-vertex scales cancel: lambda_i carries 2^e_i, z_i 2^-e_i.)
  const double inv = 1.0 / fabs(d);
  s.z[0] = (float)(n.p[0][2] * inv), s.z[1] = (float)(n.p[1][2] * inv), s.z[2] = (float)(n.p[2][2] * inv);
  if (!isfinite(s.z[0]) || !isfinite(s.z[1]) || !isfinite(s.z[2])) return false;
  s.x0 = x0, s.y0 = y0, s.x1 = x1, s.y1 = y1;
  return true;
}

// --- per-pixel evaluation -------------------------------------------------------------------------------

// An edge function's float value at (dx, dy) from its origin, from its row (a, b, c): the forward's (edge_eval) and
// the backward's (frag_grad_terms, frag_grad_pixel_t), bit for bit.
PR_HD float row_value(float a, float b, float c, float dx, float dy) { return (a * dx + b * dy) + c; }

PR_HD float edge_eval(const TriSetup& s, int i, float px, float py) {
  return row_value(s.a[i], s.b[i], s.c[i], px - s.ox, py - s.oy);
}

// Is (px, py) on the inside of edge i, given its float value l? Values within rounding distance of 0 are
// re-evaluated in double, where the rows of neighbouring triangles are still exact negations of each other:
// this keeps coverage a partition even where several edges meet near a pixel centre (shared vertices).
PR_HD bool edge_test(const TriSetup& s, int i, float l, float px, float py) {
  if (fabsf(l) > s.tol[i]) return l > 0.0f;
  double ra, rb, rc;
  exact_row(s, i, ra, rb, rc);
  double ld = s.sg * (((ra * px) + (rb * py)) + rc);
  double a = s.sg * ra, b = s.sg * rb;
  return ld > 0.0 || (ld == 0.0 && (a > 0.0 || (a == 0.0 && b > 0.0)));
}

// Whether NDC point (px, py) is drawn, and its z/w.
PR_HD bool frag_eval(const TriSetup& s, float px, float py, float& zw) {
  float l0 = edge_eval(s, 0, px, py), l1 = edge_eval(s, 1, px, py), l2 = edge_eval(s, 2, px, py);
  if (!edge_test(s, 0, l0, px, py) || !edge_test(s, 1, l1, px, py) || !edge_test(s, 2, l2, px, py)) return false;
  float S = (l0 + l1) + l2;
  if (!(S > 0.0f)) return false;
  zw = (l0 * s.z[0] + l1 * s.z[1]) + l2 * s.z[2];
  return zw >= -1.0f && zw <= 1.0f;
}

// The weighted edge values of a drawn point sum to at least this, or its barycentrics are computed in double:
// then no weighted value that underflowed matters and S * S stays a normal float.
constexpr float kMinWeightedSum = 0x1p-60f;

// An edge value of a drawn point as a barycentric numerator: the inside test said it is not negative, so a
// float value rounded below zero counts as 0.
PR_HD float inside_value(float l) { return l > 0.0f ? l : 0.0f; }

// frag_attrs in the arithmetic of T (float, or double where the float sum would be too small), from the edge
// values l and the weights w (s.bw, or their exact double values).
template <class T>
PR_HD void frag_attrs_t(const TriSetup& s, const T w[3], const float l[3], int W, int H, float* uv, float* db) {
  T L[3];
  for (int i = 0; i < 3; ++i) L[i] = w[i] * (T)inside_value(l[i]);
  const T S = (L[0] + L[1]) + L[2];
  uv[0] = (float)(L[0] / S), uv[1] = (float)(L[1] / S);
  if (!db) return;
  T A[3], B[3];
  for (int i = 0; i < 3; ++i) A[i] = w[i] * (T)s.a[i], B[i] = w[i] * (T)s.b[i];
  const T Sa = (A[0] + A[1]) + A[2], Sb = (B[0] + B[1]) + B[2];
  const T kx = (T)2 / (T)W / (S * S), ky = (T)2 / (T)H / (S * S);
  db[0] = (float)(kx * (A[0] * S - L[0] * Sa));
  db[1] = (float)(ky * (B[0] * S - L[0] * Sb));
  db[2] = (float)(kx * (A[1] * S - L[1] * Sa));
  db[3] = (float)(ky * (B[1] * S - L[1] * Sb));
}

// Perspective-correct barycentrics uv = (u, v) of a drawn NDC point (px, py) and, if db is not null, their
// analytic derivatives (du/dX, du/dY, dv/dX, dv/dY) in pixel units.
PR_HD void frag_attrs(const TriSetup& s, float px, float py, int W, int H, float* uv, float* db) {
  const float l[3] = {edge_eval(s, 0, px, py), edge_eval(s, 1, px, py), edge_eval(s, 2, px, py)};
  const float S = (s.bw[0] * inside_value(l[0]) + s.bw[1] * inside_value(l[1])) + s.bw[2] * inside_value(l[2]);
  if (S >= kMinWeightedSum) {
    frag_attrs_t<float>(s, s.bw, l, W, H, uv, db);
    return;
  }
  const double w[3] = {pow2d(-s.bw_exp[0]), pow2d(-s.bw_exp[1]), pow2d(-s.bw_exp[2])};
  frag_attrs_t<double>(s, w, l, W, H, uv, db);
}

// Is the depth key (zw, id) nearer than (bz, bid)? Ties in z/w go to the smaller ID, deterministically.
PR_HD bool key_less(float zw, int32_t id, float bz, int32_t bid) { return zw < bz || (zw == bz && id < bid); }

// Could the triangle cover any pixel centre of the rectangle [cx0, cx1] x [cy0, cy1] (NDC of centres)?
// Conservative: only rejects when some edge is negative at every corner by a clear margin.
PR_HD bool rect_may_cover(const TriSetup& s, float cx0, float cy0, float cx1, float cy1) {
  for (int i = 0; i < 3; ++i) {
    float px = s.a[i] > 0 ? cx1 : cx0, py = s.b[i] > 0 ? cy1 : cy0;
    float m = edge_eval(s, i, px, py);
    float tol = 1e-5f * (2.0f * fabsf(s.a[i]) + 2.0f * fabsf(s.b[i]) + fabsf(s.c[i]));
    if (m < -tol) return false;
  }
  return true;
}

// NDC of the first and last pixel centres of tile (tx, ty), for rect_may_cover.
PR_HD void tile_centres(int tx, int ty, int W, int H, float& cx0, float& cy0, float& cx1, float& cy1) {
  int xa = tx * kTile, ya = ty * kTile;
  int xb = xa + kTile - 1 < W - 1 ? xa + kTile - 1 : W - 1;
  int yb = ya + kTile - 1 < H - 1 ? ya + kTile - 1 : H - 1;
  cx0 = pixel_center_ndc(xa, W), cx1 = pixel_center_ndc(xb, W);
  cy0 = pixel_center_ndc(ya, H), cy1 = pixel_center_ndc(yb, H);
}

// Gradient of the loss with respect to the three vertices' (x, y, z, w), given the loss gradients gu, gv of
// the barycentrics and (optionally) gdb of (du/dX, du/dY, dv/dX, dv/dY) at pixel centre (px, py).
// With K = M^-1, lambda = K q, A_x = K e_x, A_y = K e_y, dL/dM = -K^T G K^T where G collects the gradients
// of the three vectors against q, e_x, e_y.
// It comes in two parts: frag_grad_tri (what depends on the triangle only) and frag_grad_pixel, so that a
// loop over pixels of one triangle computes the first once (GradTriCache).
//
// M is that of the normalised vertices (see the top of this file), and the barycentrics are lambda weighted by
// bw, i.e. the rows of K~ = diag(bw) K: with G the gradient to the rows of K~, dL/dM = -K~^T G K^T. The
// gradient to an original vertex is that to its normalised one times 2^-e.
//
// The rows are the forward's own edge functions (tri_edge_setup), so that a pixel's lambda is the forward's
// barycentric numerator (bit for bit where positive; on the exact path also where the forward clamped it to 0 on
// an edge) and a small triangle's keep float precision. Those are taken about a point o and scaled by |det M|: with q'
// = q - (o, 0), they are the rows of |det M| K' for K' = K T^-1 = (T M)^-1, where M' = T M has rows x - ox w, y - oy w
// and w. The formula is homogeneous of degree 1 in the rows, so it gives |det M| dL/dM'; untranslate_grad and the
// per-vertex scale (1 / |det M| times 2^-e) turn that into the gradient.
struct GradTri {
  float K[3][3];      // rows (a_i, b_i, c_i) of the forward's edge functions; zero for a degenerate triangle
  float Kw[3][3];     // diag(bw) K
  float bw[3];        // as in TriSetup
  int16_t bw_exp[3];  // as in TriSetup
  float ox, oy;       // o
  double scale[3];    // 2^-e_b / |det M|: from |det M| dL/dM' (untranslated) to the gradient of vertex b
  bool float_ok;      // the weights are normal floats well inside float's range (else only the double path)
};

PR_HD void frag_grad_tri(const float* p0, const float* p1, const float* p2, GradTri& g) {
  TriSetup s;
  double d;
  NormTri n;
  if (!tri_edge_setup(p0, p1, p2, s, d, n, false)) {
    for (int i = 0; i < 3; ++i) {
      for (int c = 0; c < 3; ++c) g.K[i][c] = g.Kw[i][c] = 0.0f;
      g.bw[i] = 0.0f, g.bw_exp[i] = 0, g.scale[i] = 0.0;
    }
    g.ox = g.oy = 0.0f;
    g.float_ok = true;
    return;
  }
  const double inv = 1.0 / fabs(d);
  for (int i = 0; i < 3; ++i) {
    g.K[i][0] = s.a[i], g.K[i][1] = s.b[i], g.K[i][2] = s.c[i];
    for (int c = 0; c < 3; ++c) g.Kw[i][c] = s.bw[i] * g.K[i][c];
    g.bw[i] = s.bw[i], g.bw_exp[i] = s.bw_exp[i];
    g.scale[i] = inv * pow2d(-n.e[i]);
  }
  g.ox = s.ox, g.oy = s.oy;
  // A weight of 2^-100 or less: Kw in float would lose the weighted rows' precision (or underflow altogether).
  g.float_ok = s.bw_exp[0] < 100 && s.bw_exp[1] < 100 && s.bw_exp[2] < 100;
}

// The gradient to the normalised vertices (x, y, w, as out[vertex][0, 1, 3]) is linear in G, the gradient to
// the rows of K~ = Kw against (q', e_x, e_y) at one pixel: G_i = (gl_i dx + gx_i, gl_i dy + gy_i, gl_i).
// frag_grad_terms computes a pixel's gl, gx, gy (and returns the sum of the weighted barycentrics S, which decides
// whether float was enough); frag_grad_apply turns G into the gradient. A loop over the pixels of one triangle
// may sum G first and apply once (the CPU backward does); a single pixel applies its terms directly
// (frag_grad_pixel_t), which avoids a cancellation in G K^T.
// (dx, dy) = (px, py) - o. With `exact`, lambda_i is the forward's value bit for bit: w_i times edge_eval's l_i
// (from the float rows K) after inside_value; without, it is Kw's row at (dx, dy), the same value for a positive l
// (the weights are powers of two) but not clamped at 0: a little cheaper, and a rounding below 0 only matters for
// weights far apart, where S comes out below kMinWeightedSum (or negative) and the caller takes the exact path.
// Each complement (S - lambda_0, Sx - Ax_0, ...) is summed from the other terms rather than subtracted: where one
// weight dominates (u near 1 for vertex scales far apart) the subtraction would cancel.
template <class T>
PR_HD T frag_grad_terms(const float K[3][3], const T Kw[3][3], const T w[3], float dx, float dy, int W, int H, T gu,
                        T gv, const float* gdb, T gl[3], T gx[3], T gy[3], bool exact) {
  T lam[3], Ax[3], Ay[3];
  for (int i = 0; i < 3; ++i) {
    // Differentiated as the linear function it is inside the triangle.
    lam[i] = exact ? w[i] * (T)inside_value(row_value(K[i][0], K[i][1], K[i][2], dx, dy))
                   : (Kw[i][0] * (T)dx + Kw[i][1] * (T)dy) + Kw[i][2];
    Ax[i] = Kw[i][0], Ay[i] = Kw[i][1];
  }
  const T S = (lam[0] + lam[1]) + lam[2];
  const T c0 = lam[1] + lam[2], c1 = lam[0] + lam[2];  // S - lambda_0, S - lambda_1
  // One division per pixel: the dozens of divisions by S and S^2 below cost more than the rest of the pixel.
  const T r = (T)1 / S, r2 = r * r;
  for (int j = 0; j < 3; ++j) {
    // e_j S - lambda: d u / d lambda_j = (e_j0 S - lambda_0) / S^2, likewise v.
    const T a0 = j == 0 ? c0 : -lam[0], a1 = j == 1 ? c1 : -lam[1];
    gl[j] = (gu * a0 + gv * a1) * r2, gx[j] = 0, gy[j] = 0;
  }
  if (!gdb) return S;
  const T cx0 = Ax[1] + Ax[2], cx1 = Ax[0] + Ax[2], cy0 = Ay[1] + Ay[2], cy1 = Ay[0] + Ay[2];  // Sx - Ax_0, ...
  const T g0 = (T)gdb[0], g1 = (T)gdb[1], g2 = (T)gdb[2], g3 = (T)gdb[3];
  const T kx = (T)2 / (T)W, ky = (T)2 / (T)H;
  // du/dX = kx (Ax_0 S - lambda_0 Sx) / S^2 = kx (Ax_0 (S - lambda_0) - lambda_0 (Sx - Ax_0)) / S^2, likewise.
  const T d[4] = {kx * (Ax[0] * c0 - lam[0] * cx0) * r2, ky * (Ay[0] * c0 - lam[0] * cy0) * r2,
                  kx * (Ax[1] * c1 - lam[1] * cx1) * r2, ky * (Ay[1] * c1 - lam[1] * cy1) * r2};
  for (int j = 0; j < 3; ++j) {
    const bool j0 = j == 0, j1 = j == 1;
    const T a0 = j0 ? c0 : -lam[0], a1 = j1 ? c1 : -lam[1];
    const T bx0 = j0 ? -cx0 : Ax[0], by0 = j0 ? -cy0 : Ay[0];  // Ax_0 - e_j0 Sx, Ay_0 - e_j0 Sy
    const T bx1 = j1 ? -cx1 : Ax[1], by1 = j1 ? -cy1 : Ay[1];
    gl[j] += g0 * (kx * bx0 * r2 - (T)2 * d[0] * r);
    gl[j] += g1 * (ky * by0 * r2 - (T)2 * d[1] * r);
    gl[j] += g2 * (kx * bx1 * r2 - (T)2 * d[2] * r);
    gl[j] += g3 * (ky * by1 * r2 - (T)2 * d[3] * r);
    gx[j] = (g0 * kx * a0 + g2 * kx * a1) * r2;
    gy[j] = (g1 * ky * a0 + g3 * ky * a1) * r2;
  }
  return S;
}

// A pixel's G from its terms.
template <class T>
PR_HD void frag_grad_rows(const T gl[3], const T gx[3], const T gy[3], float dx, float dy, T G[3][3]) {
  for (int i = 0; i < 3; ++i) G[i][0] = gl[i] * (T)dx + gx[i], G[i][1] = gl[i] * (T)dy + gy[i], G[i][2] = gl[i];
}

// -K~^T Tm as out[vertex][x, y, -, w], for Tm = G K^T.
template <class T>
PR_HD void frag_grad_finish(const T Kw[3][3], const T Tm[3][3], T out[3][4]) {
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      T dm = -(Kw[0][a] * Tm[0][b] + Kw[1][a] * Tm[1][b] + Kw[2][a] * Tm[2][b]);
      out[b][a == 2 ? 3 : a] = dm;  // rows of M are x, y, w
    }
  for (int b = 0; b < 3; ++b) out[b][2] = 0;  // z gets none
}

// -K~^T G K^T, as out[vertex][x, y, -, w].
template <class T>
PR_HD void frag_grad_apply(const T K[3][3], const T Kw[3][3], const T G[3][3], T out[3][4]) {
  T Tm[3][3];  // G K^T
  for (int i = 0; i < 3; ++i)
    for (int b = 0; b < 3; ++b) Tm[i][b] = G[i][0] * K[b][0] + G[i][1] * K[b][1] + G[i][2] * K[b][2];
  frag_grad_finish(Kw, Tm, out);
}

// The gradient for M from that for M' = T M (out[vertex][x, y, -, w]): x' = x - ox w and y' = y - oy w, so only
// w's changes.
template <class T>
PR_HD void untranslate_grad(T out[3][4], T ox, T oy) {
  for (int b = 0; b < 3; ++b) out[b][3] -= ox * out[b][0] + oy * out[b][1];
}

// One pixel: Tm_ib = G_i . K_b = gl_i l_b + gx_i a_b + gy_i b_b with l_b the pixel's edge value. Expanded as
// (gl_i dx) a_b + (gl_i dy) b_b + gl_i c_b it would cancel to rounding noise times gl_i (~ 1 / S) where l_b is 0.
template <class T>
PR_HD T frag_grad_pixel_t(const GradTri& g, const T K[3][3], const T Kw[3][3], const T w[3], float dx, float dy, int W,
                          int H, T gu, T gv, const float* gdb, T out[3][4], bool exact) {
  T gl[3], gx[3], gy[3], Tm[3][3];
  const T S = frag_grad_terms<T>(g.K, Kw, w, dx, dy, W, H, gu, gv, gdb, gl, gx, gy, exact);
  for (int b = 0; b < 3; ++b) {
    const T l = (T)row_value(g.K[b][0], g.K[b][1], g.K[b][2], dx, dy);
    for (int i = 0; i < 3; ++i) Tm[i][b] = gl[i] * l + gx[i] * K[b][0] + gy[i] * K[b][1];
  }
  frag_grad_finish(Kw, Tm, out);
  untranslate_grad<T>(out, (T)g.ox, (T)g.oy);
  return S;
}

// The gradient to the original vertices (out[vertex][x, y, z, w]; z gets none) at pixel centre (px, py).
PR_HD void frag_grad_pixel(const GradTri& g, float px, float py, int W, int H, float gu, float gv, const float* gdb,
                           float out[3][4]) {
  const float dx = px - g.ox, dy = py - g.oy;
  float o[3][4];
  const float S = g.float_ok ? frag_grad_pixel_t<float>(g, g.K, g.Kw, g.bw, dx, dy, W, H, gu, gv, gdb, o, false) : 0;
  if (S >= kMinWeightedSum && all_finite(&o[0][0], 12)) {
    for (int b = 0; b < 3; ++b)
      for (int k = 0; k < 4; ++k) out[b][k] = (float)(o[b][k] * g.scale[b]);
  } else {
    // Weights too far apart for float, a point on the triangle's boundary where float rounding cancels S, or
    // terms in 1 / S^2 past float's range.
    double K[3][3], Kw[3][3], w[3], od[3][4];
    for (int i = 0; i < 3; ++i) {
      w[i] = pow2d(-g.bw_exp[i]);
      for (int c = 0; c < 3; ++c) K[i][c] = g.K[i][c], Kw[i][c] = w[i] * K[i][c];
    }
    const double Sd = frag_grad_pixel_t<double>(g, K, Kw, w, dx, dy, W, H, gu, gv, gdb, od, true);
    for (int b = 0; b < 3; ++b)
      for (int k = 0; k < 4; ++k) out[b][k] = Sd > 0.0 ? (float)(od[b][k] * g.scale[b]) : 0.0f;
  }
  for (int b = 0; b < 3; ++b) out[b][2] = 0.0f;
}

// --- work items -----------------------------------------------------------------------------------------

// A work item is one (image, triangle) pair. Instanced: item = n * T + t. Range mode: items of image n are
// [item_start[n], item_start[n+1]) and map to triangles first[n] + k.
struct ItemMap {
  int64_t num_items = 0;
  int64_t num_triangles = 0;
  int32_t num_images = 0;
  const int64_t* item_start = nullptr;  // [N + 1], range mode only
  const int32_t* first = nullptr;       // [N], range mode only
};

PR_HD void item_to_image_tri(const ItemMap& m, int64_t item, int32_t& n, int32_t& t) {
  if (!m.item_start) {
    n = (int32_t)(item / m.num_triangles);
    t = (int32_t)(item % m.num_triangles);
    return;
  }
  int lo = 0, hi = m.num_images - 1;  // last image whose start <= item
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (m.item_start[mid] <= item)
      lo = mid;
    else
      hi = mid - 1;
  }
  n = lo;
  t = m.first[lo] + (int32_t)(item - m.item_start[lo]);
}

// Setup of one item: the vertices come from image n's pos in instanced mode, from the shared pos otherwise.
PR_HD bool item_setup(const RasterArgs& a, const ItemMap& m, int64_t item, int32_t& n, TriSetup& s) {
  int32_t t;
  item_to_image_tri(m, item, n, t);
  const float* base = m.item_start ? a.pos : a.pos + (int64_t)n * a.num_vertices * 4;
  const int32_t* idx = a.tri + (int64_t)t * 3;
  return tri_setup(base + (int64_t)idx[0] * 4, base + (int64_t)idx[1] * 4, base + (int64_t)idx[2] * 4, t, a.width,
                   a.height, s);
}

// Whether a fragment may appear in the layer after `prev` (depth peeling): only strictly behind it, so that a
// surface drawn twice at exactly the same depth (a coplanar duplicate) shows once, as in nvdiffrast.
PR_HD bool behind_prev(const float* prev, float zw, int32_t /*id1*/) {
  int32_t pid = decode_triangle_id(prev[3]);
  return pid > 0 && zw > prev[2];
}

// frag_grad_tri's result for the last triangle a pixel_backward loop met, kept while consecutive pixels belong to the
// same triangle of the same image. (The CUDA backward gives each thread one pixel, so there it is computed per
// pixel; the CPU sums whole runs instead, see rasterize_cpu.cpp.)
struct GradTriCache {
  int64_t key = -1;
  GradTri g;
};

// Pixel pix's triangle (id, 1-based) and loss gradients, or false where it passes none on: nothing drawn, or
// gradients all zero.
PR_HD bool pixel_grad_inputs(const RasterGradArgs& a, int64_t pix, int32_t& id, const float*& g, const float*& gdb) {
  id = decode_triangle_id(a.rast[pix * 4 + 3]);
  if (id <= 0 || id > a.num_triangles) return false;
  g = a.grad_rast + pix * 4;
  gdb = a.grad_db ? a.grad_db + pix * 4 : nullptr;
  return g[0] != 0.0f || g[1] != 0.0f ||
         (gdb && (gdb[0] != 0.0f || gdb[1] != 0.0f || gdb[2] != 0.0f || gdb[3] != 0.0f));
}

// Accumulates one covered pixel's gradient into grad_pos through add(flat_index, value): a plain add on the
// CPU (per-chunk buffers) and atomicAdd on the GPU.
template <class Add>
PR_HD void pixel_backward(const RasterGradArgs& a, int64_t pix, Add add, GradTriCache& cache) {
  int32_t id;
  const float *g, *gdb;
  if (!pixel_grad_inputs(a, pix, id, g, gdb)) return;
  const int64_t hw = (int64_t)a.height * a.width;
  const int64_t n = pix / hw, rem = pix % hw;
  const int y = (int)(rem / a.width), x = (int)(rem % a.width);
  const int64_t base = a.instanced ? n * a.num_vertices : 0;
  const int32_t* idx = a.tri + (int64_t)(id - 1) * 3;
  const int64_t key = (a.instanced ? n : 0) * a.num_triangles + (id - 1);
  if (key != cache.key) {
    frag_grad_tri(a.pos + (base + idx[0]) * 4, a.pos + (base + idx[1]) * 4, a.pos + (base + idx[2]) * 4, cache.g);
    cache.key = key;
  }
  float out[3][4];
  frag_grad_pixel(cache.g, pixel_center_ndc(x, a.width), pixel_center_ndc(y, a.height), a.width, a.height, g[0], g[1],
                  gdb, out);
  for (int j = 0; j < 3; ++j) {
    const int64_t o = (base + idx[j]) * 4;
    add(o + 0, out[j][0]);
    add(o + 1, out[j][1]);
    add(o + 3, out[j][3]);
  }
}

// --- entry points -----------------------------------------------------------------------------------------

// Host-side range bookkeeping: fills item_start [N + 1] and first [N] from ranges; returns the item count.
inline int64_t build_range_items(const int32_t* ranges, int64_t N, int64_t* item_start, int32_t* first) {
  int64_t acc = 0;
  for (int64_t n = 0; n < N; ++n) {
    item_start[n] = acc;
    first[n] = ranges[2 * n];
    acc += ranges[2 * n + 1];
  }
  item_start[N] = acc;
  return acc;
}

void rasterize_forward_cpu(const RasterArgs& a, const ParallelFor& pfor, int num_threads);
void rasterize_backward_cpu(const RasterGradArgs& a, const ParallelFor& pfor, int num_chunks);

// CUDA entry points return nullptr on success or a message describing the failure.
const char* rasterize_forward_cuda(const RasterArgs& a, StreamHandle stream, const Workspace& ws);
const char* rasterize_backward_cuda(const RasterGradArgs& a, StreamHandle stream, const Workspace& ws);

}  // namespace prerast
