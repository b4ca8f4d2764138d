// AVX2 shading of one (triangle, tile) pair: eight pixels of a row at a time, with the arithmetic of frag_eval.
//
// Each lane computes lambda_i = (a_i * (px - ox) + b_i * (py - oy)) + c_i, S and z/w with the same float operations in
// the same order as edge_eval and frag_eval (separate multiplies and adds: AVX2 without FMA never contracts them), so
// every lane's values are bit-identical to the scalar ones. Where lambda_i is within tol_i of 0 (or NaN) in some lane,
// edge_test's double-precision re-decision is evaluated for the row in AVX2 double arithmetic, with the same operations
// in the same order.
//
// x86-64 with GCC or clang only (the target attribute and __builtin_cpu_supports); elsewhere (aarch64, MSVC) and
// with -DPRERAST_NO_AVX2 or -DPRERAST_PORTABLE (host_builtins.h) the rasterizer takes the scalar path, which gives
// the same bits.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && \
    !defined(PRERAST_NO_AVX2) && !defined(PRERAST_PORTABLE)
#define PRERAST_HAVE_AVX2_PATH 1
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "raster_tile.h"

namespace prerast {

inline bool cpu_has_avx2() { return __builtin_cpu_supports("avx2"); }

// The outputs are written once and not read back by the rasterizer: non-temporal stores skip reading every
// cache line of them from memory first. Aligned addresses only (the outputs' rows of a tile are, whenever the
// tensor is); a fence (finish_output_stores) orders them before the op returns.
__attribute__((target("avx2"))) inline void store_output(float* p, __m256 v) {
  if (((uintptr_t)p & 31) == 0)
    _mm256_stream_ps(p, v);
  else
    _mm256_storeu_ps(p, v);
}

inline void finish_output_stores() { _mm_sfence(); }

// Stores eight pixels' (p, q, r, s) as 32 consecutive floats p0 q0 r0 s0 p1 q1 ...
__attribute__((target("avx2"))) inline void store_interleaved_avx2(__m256 p, __m256 q, __m256 r, __m256 s, float* out) {
  const __m256 pq_lo = _mm256_unpacklo_ps(p, q), pq_hi = _mm256_unpackhi_ps(p, q);  // p0 q0 p1 q1 | p4 q4 p5 q5
  const __m256 rs_lo = _mm256_unpacklo_ps(r, s), rs_hi = _mm256_unpackhi_ps(r, s);
  const __m256 px0 = _mm256_shuffle_ps(pq_lo, rs_lo, 0x44), px1 = _mm256_shuffle_ps(pq_lo, rs_lo, 0xEE);  // 0|4, 1|5
  const __m256 px2 = _mm256_shuffle_ps(pq_hi, rs_hi, 0x44), px3 = _mm256_shuffle_ps(pq_hi, rs_hi, 0xEE);  // 2|6, 3|7
  store_output(out, _mm256_permute2f128_ps(px0, px1, 0x20));
  store_output(out + 8, _mm256_permute2f128_ps(px2, px3, 0x20));
  store_output(out + 16, _mm256_permute2f128_ps(px0, px1, 0x31));
  store_output(out + 24, _mm256_permute2f128_ps(px2, px3, 0x31));
}

// The exact re-decision of edge_test for edge i, in double: the row (ra, rb, rc) of the adjugate recomputed
// from the vertices, and the tie rule, which depend only on the triangle.
struct ExactEdge {
  double ra, rb, rc, sg;
  bool tie_inside;  // the decision where the double value is exactly 0
};

inline ExactEdge exact_edge(const TriSetup& s, int i) {
  ExactEdge e;
  exact_row(s, i, e.ra, e.rb, e.rc);
  e.sg = s.sg;
  const double a = s.sg * e.ra, b = s.sg * e.rb;
  e.tie_inside = a > 0.0 || (a == 0.0 && b > 0.0);
  return e;
}

// Bit j set where lane j of edge_test's double branch says inside: ld = sg * ((ra px + rb py) + rc) > 0, or
// == 0 and the tie rule says inside.
__attribute__((target("avx2"))) inline int exact_inside_bits(const ExactEdge& e, __m256 px, double rb_py) {
  const __m256d ra = _mm256_set1_pd(e.ra), rbpy = _mm256_set1_pd(rb_py), rc = _mm256_set1_pd(e.rc);
  const __m256d sg = _mm256_set1_pd(e.sg), zero = _mm256_setzero_pd();
  int bits = 0;
  for (int half = 0; half < 2; ++half) {
    const __m256d x = _mm256_cvtps_pd(half ? _mm256_extractf128_ps(px, 1) : _mm256_castps256_ps128(px));
    const __m256d ld = _mm256_mul_pd(sg, _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(ra, x), rbpy), rc));
    __m256d in = _mm256_cmp_pd(ld, zero, _CMP_GT_OQ);
    if (e.tie_inside) in = _mm256_or_pd(in, _mm256_cmp_pd(ld, zero, _CMP_EQ_OQ));
    bits |= _mm256_movemask_pd(in) << (4 * half);
  }
  return bits;
}

__attribute__((target("avx2"))) inline __m256 lanes_of_bits(int bits) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits), lane_bit), lane_bit));
}

__attribute__((target("avx2"))) inline void draw_span_avx2(const TriSetup& s, int32_t setup_index, const TileSpan& sp,
                                                           const float* px_ndc, const float* py_ndc, TileKeys& t) {
  const __m256 one = _mm256_set1_ps(1.0f), minus_one = _mm256_set1_ps(-1.0f), zero = _mm256_setzero_ps();
  __m256 a[3], c[3], tol[3], ntol[3], z[3];
  ExactEdge exact[3];
  for (int i = 0; i < 3; ++i) {
    a[i] = _mm256_set1_ps(s.a[i]), c[i] = _mm256_set1_ps(s.c[i]), z[i] = _mm256_set1_ps(s.z[i]);
    tol[i] = _mm256_set1_ps(s.tol[i]), ntol[i] = _mm256_set1_ps(-s.tol[i]);
    exact[i] = exact_edge(s, i);
  }
  const __m256 ox = _mm256_set1_ps(s.ox);
  const __m256i id1 = _mm256_set1_epi32(s.tri + 1), item = _mm256_set1_epi32(setup_index);
  const int g0 = (sp.x0 - sp.xa) >> 3, g1 = (sp.x1 - sp.xa) >> 3;
  for (int y = sp.y0; y <= sp.y1; ++y) {
    const float py = py_ndc[y];
    __m256 bpy[3];
    for (int i = 0; i < 3; ++i) bpy[i] = _mm256_set1_ps(s.b[i] * (py - s.oy));
    for (int g = g0; g <= g1; ++g) {
      const int xg = sp.xa + 8 * g;
      // Lanes of the span: x0 <= x <= x1.
      const int lo = std::max(sp.x0 - xg, 0), hi = std::min(sp.x1 - xg, 7);
      int inside = (0xFF >> (7 - hi)) & (0xFF << lo) & 0xFF;
      const __m256 px = _mm256_loadu_ps(px_ndc + xg), dx = _mm256_sub_ps(px, ox);
      __m256 l[3];
      for (int i = 0; i < 3 && inside; ++i) {
        l[i] = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(a[i], dx), bpy[i]), c[i]);
        // edge_test: far from 0 (|l| > tol), the float sign decides; otherwise (or NaN) the double value.
        const int far = _mm256_movemask_ps(
            _mm256_or_ps(_mm256_cmp_ps(l[i], tol[i], _CMP_GT_OQ), _mm256_cmp_ps(l[i], ntol[i], _CMP_LT_OQ)));
        int in = far & _mm256_movemask_ps(_mm256_cmp_ps(l[i], zero, _CMP_GT_OQ));
        if (~far & inside) in |= ~far & exact_inside_bits(exact[i], px, exact[i].rb * (double)py);
        inside &= in;
      }
      if (!inside) continue;
      const __m256 S = _mm256_add_ps(_mm256_add_ps(l[0], l[1]), l[2]);
      const __m256 zw =
          _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(l[0], z[0]), _mm256_mul_ps(l[1], z[1])), _mm256_mul_ps(l[2], z[2]));
      const __m256 valid =
          _mm256_and_ps(_mm256_cmp_ps(S, zero, _CMP_GT_OQ),
                        _mm256_and_ps(_mm256_cmp_ps(zw, minus_one, _CMP_GE_OQ), _mm256_cmp_ps(zw, one, _CMP_LE_OQ)));
      inside &= _mm256_movemask_ps(valid);
      if (!inside) continue;
      // key_less(zw, id1, bz, bid), or nothing drawn yet.
      const int k = (y - sp.ya) * kTile + (xg - sp.xa);
      const __m256 bz = _mm256_load_ps(t.z + k);
      const __m256i bid = _mm256_load_si256((const __m256i*)(t.id + k));
      const __m256 empty = _mm256_castsi256_ps(_mm256_cmpeq_epi32(bid, _mm256_setzero_si256()));
      const __m256 id_less = _mm256_castsi256_ps(_mm256_cmpgt_epi32(bid, id1));
      const __m256 nearer =
          _mm256_or_ps(_mm256_cmp_ps(zw, bz, _CMP_LT_OQ), _mm256_and_ps(_mm256_cmp_ps(zw, bz, _CMP_EQ_OQ), id_less));
      const __m256 take = _mm256_and_ps(lanes_of_bits(inside), _mm256_or_ps(empty, nearer));
      _mm256_store_ps(t.z + k, _mm256_blendv_ps(bz, zw, take));
      _mm256_store_si256((__m256i*)(t.id + k), _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bid),
                                                                                    _mm256_castsi256_ps(id1), take)));
      const __m256 bitem = _mm256_load_ps((const float*)(t.item + k));
      _mm256_store_ps((float*)(t.item + k), _mm256_blendv_ps(bitem, _mm256_castsi256_ps(item), take));
    }
  }
}

// Writes pixels [x, x + 8) of tile row `row` of t: (u, v, z/w, id) to rast and, if db is not null, frag_attrs'
// derivatives to db, both interleaved [8][4]. The winners' edge functions and weights are gathered from setups
// (stride floats per TriSetup, indices in int32 range) and evaluated as frag_attrs does in float. Returns false,
// having written nothing, where some drawn lane needs frag_attrs' double-precision path.
__attribute__((target("avx2"))) inline bool write_group_avx2(const TileKeys& t, int k, const TriSetup* setups,
                                                             const float* px_ndc, int x, float py, float two_w,
                                                             float two_h, float* rast, float* db) {
  constexpr int stride = sizeof(TriSetup) / sizeof(float);
  const __m256i id = _mm256_load_si256((const __m256i*)(t.id + k));
  const __m256 drawn = _mm256_castsi256_ps(_mm256_cmpgt_epi32(id, _mm256_setzero_si256()));
  const __m256 zero = _mm256_setzero_ps();
  if (_mm256_movemask_ps(drawn) == 0) {
    for (int j = 0; j < 4; ++j) store_output(rast + 8 * j, zero);
    if (db)
      for (int j = 0; j < 4; ++j) store_output(db + 8 * j, zero);
    return true;
  }
  const __m256i items = _mm256_load_si256((const __m256i*)(t.item + k));
  const __m256i base = _mm256_mullo_epi32(items, _mm256_set1_epi32(stride));
  const float* s0 = (const float*)setups;
  // Where one triangle won all eight pixels (most groups, unless triangles are a few pixels across), its fields
  // are the same in every lane: broadcast them rather than gather (a gather costs several times a load).
  const bool one_winner =
      _mm256_movemask_ps(drawn) == 0xFF &&
      _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(items, _mm256_set1_epi32(t.item[k])))) == 0xFF;
  const float* s1 = one_winner ? (const float*)(setups + t.item[k]) : s0;
#define PRERAST_FIELD(offset) \
  (one_winner ? _mm256_set1_ps(s1[offset]) : _mm256_mask_i32gather_ps(zero, s0 + (offset), base, drawn, 4))
  const __m256 px = _mm256_loadu_ps(px_ndc + x), pyv = _mm256_set1_ps(py);
  const __m256 dx = _mm256_sub_ps(px, PRERAST_FIELD(offsetof(TriSetup, ox) / 4));
  const __m256 dy = _mm256_sub_ps(pyv, PRERAST_FIELD(offsetof(TriSetup, oy) / 4));
  __m256 a[3], b[3], w[3], L[3];
  for (int i = 0; i < 3; ++i) {
    a[i] = PRERAST_FIELD(offsetof(TriSetup, a) / 4 + i), b[i] = PRERAST_FIELD(offsetof(TriSetup, b) / 4 + i);
    w[i] = PRERAST_FIELD(offsetof(TriSetup, bw) / 4 + i);
    const __m256 c = PRERAST_FIELD(offsetof(TriSetup, c) / 4 + i);
    const __m256 l = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(a[i], dx), _mm256_mul_ps(b[i], dy)), c);
    L[i] = _mm256_mul_ps(w[i], _mm256_max_ps(l, zero));  // inside_value: max_ps(-0, 0) and max_ps(NaN, 0) give 0
  }
#undef PRERAST_FIELD
  const __m256 S = _mm256_add_ps(_mm256_add_ps(L[0], L[1]), L[2]);
  const __m256 enough = _mm256_cmp_ps(S, _mm256_set1_ps(kMinWeightedSum), _CMP_GE_OQ);
  if (_mm256_movemask_ps(_mm256_andnot_ps(enough, drawn))) return false;
  const __m256 u = _mm256_and_ps(drawn, _mm256_div_ps(L[0], S)), v = _mm256_and_ps(drawn, _mm256_div_ps(L[1], S));
  // encode_triangle_id on 8 lanes: n itself up to 2^24, else the float whose bit pattern is kTriangleIdBits + n.
  const __m256 big = _mm256_castsi256_ps(_mm256_cmpgt_epi32(id, _mm256_set1_epi32(1 << 24)));
  const __m256 idf = _mm256_blendv_ps(
      _mm256_cvtepi32_ps(id), _mm256_castsi256_ps(_mm256_add_epi32(id, _mm256_set1_epi32(kTriangleIdBits))), big);
  const __m256 z = _mm256_and_ps(drawn, _mm256_load_ps(t.z + k));
  store_interleaved_avx2(u, v, z, idf, rast);
  if (!db) return true;
  // frag_attrs_t: A = w a, B = w b, kx = 2 / W / (S * S), db = (kx (A0 S - L0 SA), ky (B0 S - L0 SB), ...).
  __m256 A[3], B[3];
  for (int i = 0; i < 3; ++i) A[i] = _mm256_mul_ps(w[i], a[i]), B[i] = _mm256_mul_ps(w[i], b[i]);
  const __m256 Sa = _mm256_add_ps(_mm256_add_ps(A[0], A[1]), A[2]), Sb = _mm256_add_ps(_mm256_add_ps(B[0], B[1]), B[2]);
  const __m256 S2 = _mm256_mul_ps(S, S);
  const __m256 kx = _mm256_div_ps(_mm256_set1_ps(two_w), S2), ky = _mm256_div_ps(_mm256_set1_ps(two_h), S2);
#define PRERAST_TERM(k_, e, li, Se) \
  _mm256_and_ps(drawn, _mm256_mul_ps(k_, _mm256_sub_ps(_mm256_mul_ps(e, S), _mm256_mul_ps(li, Se))))
  store_interleaved_avx2(PRERAST_TERM(kx, A[0], L[0], Sa), PRERAST_TERM(ky, B[0], L[0], Sb),
                         PRERAST_TERM(kx, A[1], L[1], Sa), PRERAST_TERM(ky, B[1], L[1], Sb), db);
#undef PRERAST_TERM
  return true;
}

}  // namespace prerast

#endif
