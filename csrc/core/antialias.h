// Analytic antialiasing shared by the CPU loops and the CUDA kernels.
//
// Every pixel (x, y) owns two pairs: with its right neighbour (x+1, y) and with its upper neighbour (x, y+1).
// A pair whose pixels show different triangle IDs (background included) is resolved as follows.
//   1. Front: the pixel whose surface is nearer: smaller z/w, ties to the smaller ID, background farthest.
//      Its triangle F is the one whose outline may separate the two pixels; P_F is its pixel's centre, P_B the
//      other's.
//   2. Crossing: F's edge functions (the rasterizer's own, so P_F is inside them) are linear along the segment
//      P_F -> P_B. Among the edges that P_B is outside of (by the rasterizer's inside test), the segment leaves
//      F through the one it crosses first: smallest t = L(P_F) / (L(P_F) - L(P_B)), t in pixels from P_F. If
//      P_B is inside every edge (the surfaces intersect there), the pair is left alone. So is it when that edge
//      is not of the pair's direction: a horizontal pair resolves only edges closer to vertical than to
//      horizontal on screen (|dy| >= |dx| in pixels), a vertical pair only the others, so that each silhouette
//      crossing is blended once (resolved by both, a slanted edge would be counted twice and a coverage mask's
//      position gradient would be twice its area's derivative).
//   3. Silhouette: that edge, with vertex indices {j, k}, is a silhouette unless another triangle of tri with
//      the same two indices has its third vertex m strictly on the other side of the edge's line on screen than
//      F's third vertex (det(v_j, v_k, v_m) of clip-space (x, y, w) with the sign opposite to F's). Then the
//      surface continues across the edge (two triangles of one surface, whichever way they face) and the pair
//      is left alone. A boundary edge, or one where the surface folds back (a contour of a closed mesh: the
//      other triangle lies on F's side, behind it), is a silhouette. Edges are matched by vertex index, so a
//      mesh whose vertices are split along seams has silhouettes along those seams; in range mode the table
//      spans all of tri, whichever triangles an image drew.
//   4. Blend: along the segment F covers [0, t]. With each pixel's footprint taken as +-1/2 around its centre
//      on the segment's axis, the edge cuts exactly one of the two footprints: the back pixel's when t > 1/2
//      (F covers t - 1/2 of it), else the front pixel's (B's surface covers 1/2 - t of it). That pixel gets
//      its exact coverage on this axis: out_target += alpha * (color_other - color_target), alpha = |t - 1/2|.
// A pixel's updates from its (up to four) pairs add up; each lies in its own half of the footprint on its axis.
// The result is linear in color and continuous and piecewise linear in t, hence in the vertex positions away
// from pixel centres (and from edges at 45 degrees, where an edge passes from one pair direction to the other):
// the backward pass is its exact adjoint, with gradients to pos through t alone. For a coverage mask, an edge
// moved by d pixels across its pair direction changes each crossing's t by d, so the sum's gradient is the
// derivative of the covered area.
//
// The forward pass first stores, per pair, tau = where the edge crosses measured from the pair's first (owner)
// pixel, or -1; each pixel then gathers its four pairs in a fixed order, so no atomics are needed and CPU and
// GPU results agree bit for bit.
#pragma once

#include "rasterize.h"

namespace prerast {

struct AntialiasArgs {
  const float* color = nullptr;  // [N, H, W, C]
  const float* rast = nullptr;   // [N, H, W, 4], triangle IDs validated to lie in [0, T]
  const float* pos = nullptr;    // [N, V, 4] (instanced) or [V, 4]
  const int32_t* tri = nullptr;  // [T, 3], indices validated to lie in [0, V)
  // Edge -> triangles table: half-edge h = 3 * triangle + i is the edge opposite the triangle's vertex i;
  // half_edges lists all 3T of them grouped by undirected edge, group_of[h] is h's group and
  // group_start[g] .. group_start[g + 1] that group's slice of half_edges.
  const int32_t* half_edges = nullptr;
  const int32_t* group_of = nullptr;
  const int32_t* group_start = nullptr;
  bool instanced = true;
  int64_t num_images = 0, num_vertices = 0, num_triangles = 0, channels = 0;
  int height = 0, width = 0;
  float* crossing = nullptr;  // [N, H, W, 2]: tau of the pixel's (right, up) pairs, or -1 (not blended)
  float* out = nullptr;       // [N, H, W, C]
  // Backward only.
  const float* grad_out = nullptr;
  float* grad_color = nullptr;  // [N, H, W, C]
  float* grad_pos = nullptr;    // shaped like pos, zero-initialised
  float pos_grad_scale = 1.0f;
};

// The silhouette crossing of one pair (step 2 and 3 above), with what its gradient needs.
struct PairCrossing {
  int64_t front, back;  // flat pixel indices
  int64_t row[2];       // offsets into pos of the crossed edge's vertices j, k (edge row = sg * v_j x v_k)
  V3 vj, vk;            // their normalised clip-space (x, y, w) (rasterize.h: normalise_vertices)
  int ej, ek;           // and the exponents of that normalisation: v = 2^e * (normalised v)
  float sg;             // orientation of F: edge rows are sg * (v_j x v_k)
  float pf[2], pb[2];   // NDC of P_F and P_B
  float lf, lb;         // the edge function at P_F and P_B
  float t;              // lf / (lf - lb), clamped to [0, 1]
  bool clamped;
};

// The second pixel of the pair owned by pix in direction dir (0: right, 1: up); false at the image border.
PR_HD bool pair_second(const AntialiasArgs& a, int64_t pix, int dir, int64_t& q) {
  if (dir == 0) {
    if ((int)(pix % a.width) + 1 >= a.width) return false;
    q = pix + 1;
  } else {
    if ((int)((pix / a.width) % a.height) + 1 >= a.height) return false;
    q = pix + a.width;
  }
  return true;
}

// Is the first pixel's surface in front of the second's? (Only asked when their IDs differ.)
PR_HD bool first_in_front(const float* r0, const float* r1) {
  if (r0[3] == 0.0f) return false;
  if (r1[3] == 0.0f) return true;
  return key_less(r0[2], decode_triangle_id(r0[3]), r1[2], decode_triangle_id(r1[3]));
}

// Step 2's direction rule: does edge i of s face pairs of direction dir (0: horizontal, 1: vertical) in an image
// of width x height pixels? Along pixel coordinates (X, Y) the edge function ra x + rb y + rc of NDC (x, y) has
// gradient (2 ra / W, 2 rb / H), and the edge's direction (dx, dy) is normal to it: |dy| / |dx| =
// (|ra| / W) / (|rb| / H). Decided from the exact row in double, so the CPU and the GPU take the same side of the
// tie |dy| = |dx| (the horizontal pair's). Homogeneous, so it holds for edges through w <= 0 too.
PR_HD bool edge_faces_direction(const TriSetup& s, int i, int dir, int width, int height) {
  double ra, rb, rc;
  exact_row(s, i, ra, rb, rc);
  const bool steep = fabs(ra) * (double)height >= fabs(rb) * (double)width;  // |dy| >= |dx|
  return dir == 0 ? steep : !steep;
}

// Does another triangle on edge e of triangle f continue the surface across it? n is F's edge row, positive on
// F's side; base is the image's first row of pos.
PR_HD bool edge_continues(const AntialiasArgs& a, const float* base, int64_t f, int e, const float n[3]) {
  const int64_t h = 3 * f + e;
  const int32_t g = a.group_of[h];
  for (int32_t s = a.group_start[g]; s < a.group_start[g + 1]; ++s) {
    const int32_t h2 = a.half_edges[s];
    if (h2 / 3 == f) continue;
    const float* m = base + (int64_t)a.tri[h2] * 4;  // vertex h2 % 3 of the other triangle: its third one
    const double side = ((double)n[0] * m[0] + (double)n[1] * m[1]) + (double)n[2] * m[3];
    if (side < 0.0) return true;
  }
  return false;
}

// Steps 1-3 for the pair owned by pix in direction dir: false if its pixels show one ID, the front triangle
// has no edge of that direction between them, or that edge is not a silhouette.
PR_HD bool pair_crossing(const AntialiasArgs& a, int64_t pix, int dir, PairCrossing& c) {
  int64_t q;
  if (!pair_second(a, pix, dir, q)) return false;
  const float* rp = a.rast + pix * 4;
  const float* rq = a.rast + q * 4;
  if (rp[3] == rq[3]) return false;
  const bool p_front = first_in_front(rp, rq);
  c.front = p_front ? pix : q, c.back = p_front ? q : pix;
  const int32_t id = decode_triangle_id((p_front ? rp : rq)[3]);
  if (!(id >= 1 && id <= a.num_triangles)) return false;
  const int64_t f = (int64_t)id - 1;
  const int64_t hw = (int64_t)a.height * a.width;
  const float* base = a.pos + (a.instanced ? (pix / hw) * a.num_vertices * 4 : 0);
  const int32_t* idx = a.tri + f * 3;
  TriSetup s;
  double det;
  NormTri nt;
  const int64_t fx = c.front % a.width, fy = (c.front / a.width) % a.height;
  const int64_t bx = c.back % a.width, by = (c.back / a.width) % a.height;
  c.pf[0] = pixel_center_ndc((int)fx, a.width), c.pf[1] = pixel_center_ndc((int)fy, a.height);
  c.pb[0] = pixel_center_ndc((int)bx, a.width), c.pb[1] = pixel_center_ndc((int)by, a.height);
  if (!tri_edge_setup(base + (int64_t)idx[0] * 4, base + (int64_t)idx[1] * 4, base + (int64_t)idx[2] * 4, s, det, nt))
    return false;
  int e = -1;
  float best = 0.0f, leave = INFINITY;  // the first crossing of an edge of dir's direction, and of any edge
  for (int i = 0; i < 3; ++i) {
    const float lb = edge_eval(s, i, c.pb[0], c.pb[1]);
    if (edge_test(s, i, lb, c.pb[0], c.pb[1])) continue;
    const float lf = edge_eval(s, i, c.pf[0], c.pf[1]);
    if (!(lf - lb > 0.0f)) continue;
    const float t = lf / (lf - lb);
    leave = fminf(leave, t);
    if (!edge_faces_direction(s, i, dir, a.width, a.height)) continue;
    if (e < 0 || t < best) e = i, best = t, c.lf = lf, c.lb = lb;
  }
  // Past the exit the line of an edge of this direction no longer bounds F: the segment left F through an edge
  // of the other direction, whose crossing the other pairs resolve. Where the segment passes through a vertex
  // the two t come from different edges' float values, so which one is first is decided by their rounding:
  // the same on the CPU and the GPU, and either answer blends a crossing at most once.
  if (e < 0 || best > leave) return false;
  double ra, rb, rc;  // edge e's row about the NDC origin, as edge_continues takes it
  exact_row(s, e, ra, rb, rc);
  const float n[3] = {(float)(s.sg * ra), (float)(s.sg * rb), (float)(s.sg * rc)};
  if (edge_continues(a, base, f, e, n)) return false;
  const int j = (e + 1) % 3, k = (e + 2) % 3;
  c.row[0] = (base - a.pos) + (int64_t)idx[j] * 4, c.row[1] = (base - a.pos) + (int64_t)idx[k] * 4;
  c.vj = {s.v[j][0], s.v[j][1], s.v[j][2]}, c.vk = {s.v[k][0], s.v[k][1], s.v[k][2]};
  c.ej = nt.e[j], c.ek = nt.e[k];
  c.sg = s.sg;
  c.clamped = !(best >= 0.0f && best <= 1.0f);
  c.t = c.clamped ? (best > 1.0f ? 1.0f : 0.0f) : best;
  return true;
}

// First pass: tau of the pair owned by pix in direction dir, from the first pixel's centre; -1 if not blended.
PR_HD float pair_tau(const AntialiasArgs& a, int64_t pix, int dir) {
  PairCrossing c;
  if (!pair_crossing(a, pix, dir, c)) return -1.0f;
  return c.front == pix ? c.t : 1.0f - c.t;
}

// The pair on side `side` of pix (0 left, 1 right, 2 below, 3 above): its tau slot, the other pixel, and
// whether pix is the pair's first pixel. False at the border.
// (x, y) are pix's column and row.
PR_HD bool pair_around(const AntialiasArgs& a, int64_t pix, int x, int y, int side, int64_t& slot, int64_t& other,
                       bool& first) {
  switch (side) {
    case 0:
      if (x == 0) return false;
      other = pix - 1, slot = 2 * other, first = false;
      return true;
    case 1:
      if (x + 1 >= a.width) return false;
      other = pix + 1, slot = 2 * pix, first = true;
      return true;
    case 2:
      if (y == 0) return false;
      other = pix - a.width, slot = 2 * other + 1, first = false;
      return true;
    default:
      if (y + 1 >= a.height) return false;
      other = pix + a.width, slot = 2 * pix + 1, first = true;
      return true;
  }
}

// The blended pixel of a pair is its first one when tau <= 1/2 (the edge cuts the first footprint).
PR_HD bool first_is_target(float tau) { return !(tau > 0.5f); }

// Calls fn(other, alpha, pix_is_target) for each blended pair around pix (at column x, row y), in a fixed order
// (left, right, below, above): `other` is the pair's other pixel and alpha = |tau - 1/2| its blend weight.
template <class Fn>
PR_HD void for_each_blended_pair(const AntialiasArgs& a, int64_t pix, int x, int y, Fn fn) {
  for (int side = 0; side < 4; ++side) {
    int64_t slot, other;
    bool first;
    if (!pair_around(a, pix, x, y, side, slot, other, first)) continue;
    const float tau = a.crossing[slot];
    if (tau < 0.0f) continue;
    fn(other, fabsf(tau - 0.5f), first_is_target(tau) == first);
  }
}

// Column and row of pixel pix.
PR_HD int pixel_x(const AntialiasArgs& a, int64_t pix) { return (int)(pix % a.width); }
PR_HD int pixel_y(const AntialiasArgs& a, int64_t pix) { return (int)((pix / a.width) % a.height); }

// The number of channels from c0 on that a pass of K channels takes: kChannels when that is known (the image has
// exactly kChannels <= K channels, and c0 = 0), else counted.
template <int K, int kChannels>
PR_HD int channels_in_pass(const AntialiasArgs& a, int64_t c0) {
  static_assert(kChannels >= 0 && kChannels <= K, "a known channel count fits one pass");
  return kChannels ? kChannels : (a.channels - c0 < K ? (int)(a.channels - c0) : K);
}

// Second pass: channels c0 .. c0 + K - 1 (those that exist) of the antialiased pixel pix (at column x, row y),
// accumulated in registers and written to out (indexed by channel). The GPU asks for one channel per thread, the
// CPU for K at a time; each channel sees the same additions in the same order either way.
template <int K, int kChannels = 0>
PR_HD void antialias_values(const AntialiasArgs& a, int64_t pix, int x, int y, int64_t c0, float* out) {
  const float* mine = a.color + pix * a.channels + c0;
  const int n = channels_in_pass<K, kChannels>(a, c0);
  float acc[K];
  for (int k = 0; k < n; ++k) acc[k] = mine[k];
  for_each_blended_pair(a, pix, x, y, [&](int64_t other, float alpha, bool pix_is_target) {
    if (!pix_is_target) return;
    const float* theirs = a.color + other * a.channels + c0;
    for (int k = 0; k < n; ++k) acc[k] += alpha * (theirs[k] - mine[k]);
  });
  for (int k = 0; k < n; ++k) out[c0 + k] = acc[k];
}

template <int K>
PR_HD void antialias_values(const AntialiasArgs& a, int64_t pix, int64_t c0, float* out) {
  antialias_values<K>(a, pix, pixel_x(a, pix), pixel_y(a, pix), c0, out);
}

// Gradient of channels c0 .. c0 + K - 1 of pixel pix's input color, as above: its own output's gradient, less
// what it gave away where it was blended, plus what it contributed to neighbours blended toward it.
template <int K, int kChannels = 0>
PR_HD void antialias_color_grads(const AntialiasArgs& a, int64_t pix, int x, int y, int64_t c0, float* out) {
  const float* g = a.grad_out + pix * a.channels + c0;
  const int n = channels_in_pass<K, kChannels>(a, c0);
  float acc[K];
  for (int k = 0; k < n; ++k) acc[k] = g[k];
  for_each_blended_pair(a, pix, x, y, [&](int64_t other, float alpha, bool pix_is_target) {
    const float* theirs = a.grad_out + other * a.channels + c0;
    for (int k = 0; k < n; ++k) acc[k] += pix_is_target ? -alpha * g[k] : alpha * theirs[k];
  });
  for (int k = 0; k < n; ++k) out[c0 + k] = acc[k];
}

template <int K>
PR_HD void antialias_color_grads(const AntialiasArgs& a, int64_t pix, int64_t c0, float* out) {
  antialias_color_grads<K>(a, pix, pixel_x(a, pix), pixel_y(a, pix), c0, out);
}

// Gradient to pos from the pair owned by pix in direction dir, through its crossing t, delivered to
// add(flat index into pos, value).
template <class Add>
PR_HD void antialias_pos_backward(const AntialiasArgs& a, int64_t pix, int dir, Add add) {
  const float tau = a.crossing[2 * pix + dir];
  if (tau < 0.0f) return;
  PairCrossing c;
  if (!pair_crossing(a, pix, dir, c) || c.clamped) return;
  const bool to_first = first_is_target(tau);
  const int64_t second = c.front == pix ? c.back : c.front;
  const int64_t target = to_first ? pix : second, source = to_first ? second : pix;
  float ga = 0.0f;  // dL/dalpha
  for (int64_t ch = 0; ch < a.channels; ++ch)
    ga +=
        a.grad_out[target * a.channels + ch] * (a.color[source * a.channels + ch] - a.color[target * a.channels + ch]);
  if (ga == 0.0f) return;
  // alpha = |tau - 1/2| on the branch chosen by the forward pass; tau = t or 1 - t as the owner is front or not.
  const float dtau = (to_first ? -1.0f : 1.0f) * (c.front == pix ? 1.0f : -1.0f);
  const float gt = ga * dtau * a.pos_grad_scale;
  const float den = c.lf - c.lb;
  const float gf = gt * (-c.lb / (den * den)), gb = gt * (c.lf / (den * den));
  // L(P) = sg * (v_j x v_k) . P with P = (px, py, 1): dL/dv_j = sg * v_k x P, dL/dv_k = sg * P x v_j, for the
  // normalised v; the original vertex v * 2^e gets that times 2^-e.
  const V3 gn{gf * c.pf[0] + gb * c.pb[0], gf * c.pf[1] + gb * c.pb[1], gf + gb};
  const V3 gj = cross3(c.vk, gn), gk = cross3(gn, c.vj);
  add(c.row[0] + 0, scale_pow2(c.sg * gj.x, -c.ej)), add(c.row[0] + 1, scale_pow2(c.sg * gj.y, -c.ej));
  add(c.row[0] + 3, scale_pow2(c.sg * gj.z, -c.ej));
  add(c.row[1] + 0, scale_pow2(c.sg * gk.x, -c.ek)), add(c.row[1] + 1, scale_pow2(c.sg * gk.y, -c.ek));
  add(c.row[1] + 3, scale_pow2(c.sg * gk.z, -c.ek));
}

void antialias_forward_cpu(const AntialiasArgs& a, const ParallelFor& pfor);
void antialias_backward_cpu(const AntialiasArgs& a, const ParallelFor& pfor, int num_chunks);

// CUDA entry points return nullptr on success or a message describing the failure.
const char* antialias_forward_cuda(const AntialiasArgs& a, StreamHandle stream);
const char* antialias_backward_cuda(const AntialiasArgs& a, StreamHandle stream, const Workspace& ws);

}  // namespace prerast
