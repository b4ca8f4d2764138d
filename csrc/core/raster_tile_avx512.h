// AVX-512 shading of one (triangle, tile) pair: a whole tile row (16 pixels) at a time, with the arithmetic of
// raster_tile_avx2.h, itself frag_eval's.
//
// The same float and double operations in the same order as draw_span_avx2 and write_group_avx2 (separate
// multiplies and adds: the build has -ffp-contract=off, and no FMA intrinsic is used), the same comparisons, the
// same double-precision re-decision where |lambda_i| <= tol_i, so every lane's bits are the scalar path's. Masks
// (__mmask16) replace movemask and blendv: a masked store writes the pixels a triangle takes.
//
// Built where the AVX2 path is (x86-64, GCC or clang) unless -DPRERAST_NO_AVX512; chosen at run time by the CPU
// (avx512f, bw, dq and vl) and PRERAST_CPU_SIMD (cpu_simd.h).
#pragma once

#include "raster_tile_avx2.h"

#if defined(PRERAST_HAVE_AVX2_PATH) && !defined(PRERAST_NO_AVX512)
#define PRERAST_HAVE_AVX512_PATH 1
#define PRERAST_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() (a self-initialised variable) as the unused source of
// their unmasked forms, and -W(maybe-)uninitialized reports it wherever they are inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace prerast {

static_assert(kTile == 16, "one tile row is one 16-lane register");

inline bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

// As store_output: non-temporal where the 64 bytes are one aligned cache line.
PRERAST_AVX512 inline void store_output_avx512(float* p, __m512 v) {
  if (((uintptr_t)p & 63) == 0)
    _mm512_stream_ps(p, v);
  else
    _mm512_storeu_ps(p, v);
}

// Stores sixteen pixels' (p, q, r, s) as 64 consecutive floats p0 q0 r0 s0 p1 q1 ...
PRERAST_AVX512 inline void store_interleaved_avx512(__m512 p, __m512 q, __m512 r, __m512 s, float* out) {
  const __m512 pq_lo = _mm512_unpacklo_ps(p, q), pq_hi = _mm512_unpackhi_ps(p, q);  // per 128-bit lane j: p4j q4j ..
  const __m512 rs_lo = _mm512_unpacklo_ps(r, s), rs_hi = _mm512_unpackhi_ps(r, s);
  // Lane j of px<m> is pixel 4j + m.
  const __m512 px0 = _mm512_shuffle_ps(pq_lo, rs_lo, 0x44), px1 = _mm512_shuffle_ps(pq_lo, rs_lo, 0xEE);
  const __m512 px2 = _mm512_shuffle_ps(pq_hi, rs_hi, 0x44), px3 = _mm512_shuffle_ps(pq_hi, rs_hi, 0xEE);
  // Transpose the 4x4 of 128-bit lanes: output register j holds lane j of px0, px1, px2, px3.
  const __m512 t0 = _mm512_shuffle_f32x4(px0, px1, 0x44), t1 = _mm512_shuffle_f32x4(px2, px3, 0x44);
  const __m512 t2 = _mm512_shuffle_f32x4(px0, px1, 0xEE), t3 = _mm512_shuffle_f32x4(px2, px3, 0xEE);
  store_output_avx512(out, _mm512_shuffle_f32x4(t0, t1, 0x88));
  store_output_avx512(out + 16, _mm512_shuffle_f32x4(t0, t1, 0xDD));
  store_output_avx512(out + 32, _mm512_shuffle_f32x4(t2, t3, 0x88));
  store_output_avx512(out + 48, _mm512_shuffle_f32x4(t2, t3, 0xDD));
}

// exact_inside_bits on 16 lanes, whose px (as double) are x[0] (lanes 0-7) and x[1]: ld = sg * ((ra px + rb py)
// + rc) > 0, or == 0 and the tie rule says inside.
PRERAST_AVX512 inline __mmask16 exact_inside_avx512(const ExactEdge& e, const __m512d x[2], double rb_py) {
  const __m512d ra = _mm512_set1_pd(e.ra), rbpy = _mm512_set1_pd(rb_py), rc = _mm512_set1_pd(e.rc);
  const __m512d sg = _mm512_set1_pd(e.sg), zero = _mm512_setzero_pd();
  __mmask16 bits = 0;
  for (int half = 0; half < 2; ++half) {
    const __m512d ld = _mm512_mul_pd(sg, _mm512_add_pd(_mm512_add_pd(_mm512_mul_pd(ra, x[half]), rbpy), rc));
    __mmask8 in = _mm512_cmp_pd_mask(ld, zero, _CMP_GT_OQ);
    if (e.tie_inside) in |= _mm512_cmp_pd_mask(ld, zero, _CMP_EQ_OQ);
    bits |= (__mmask16)(in << (8 * half));
  }
  return bits;
}

PRERAST_AVX512 inline void draw_span_avx512(const TriSetup& s, int32_t setup_index, const TileSpan& sp,
                                            const float* px_ndc, const float* py_ndc, TileKeys& t) {
  const __m512 one = _mm512_set1_ps(1.0f), minus_one = _mm512_set1_ps(-1.0f), zero = _mm512_setzero_ps();
  __m512 a[3], c[3], tol[3], ntol[3], z[3];
  ExactEdge exact[3];  // edge i's, once a lane first needs it (most pairs never do)
  int have_exact = 0;
  for (int i = 0; i < 3; ++i) {
    a[i] = _mm512_set1_ps(s.a[i]), c[i] = _mm512_set1_ps(s.c[i]), z[i] = _mm512_set1_ps(s.z[i]);
    tol[i] = _mm512_set1_ps(s.tol[i]), ntol[i] = _mm512_set1_ps(-s.tol[i]);
  }
  const __m512i id1 = _mm512_set1_epi32(s.tri + 1), item = _mm512_set1_epi32(setup_index);
  // Lanes of the span: x0 <= x <= x1 (px_ndc is padded to whole tiles, so the row's 16 loads are in bounds).
  const __mmask16 span = (__mmask16)((0xFFFFu >> (15 - (sp.x1 - sp.xa))) & (0xFFFFu << (sp.x0 - sp.xa)));
  const __m512 px = _mm512_loadu_ps(px_ndc + sp.xa), dx = _mm512_sub_ps(px, _mm512_set1_ps(s.ox));
  const __m512d px_double[2] = {_mm512_cvtps_pd(_mm256_loadu_ps(px_ndc + sp.xa)),
                                _mm512_cvtps_pd(_mm256_loadu_ps(px_ndc + sp.xa + 8))};
  __m512 adx[3];
  for (int i = 0; i < 3; ++i) adx[i] = _mm512_mul_ps(a[i], dx);
  for (int y = sp.y0; y <= sp.y1; ++y) {
    const float py = py_ndc[y];
    __mmask16 inside = span;
    __m512 l[3];
    for (int i = 0; i < 3 && inside; ++i) {
      l[i] = _mm512_add_ps(_mm512_add_ps(adx[i], _mm512_set1_ps(s.b[i] * (py - s.oy))), c[i]);
      // edge_test: far from 0 (|l| > tol), the float sign decides; otherwise (or NaN) the double value.
      const __mmask16 far =
          _mm512_cmp_ps_mask(l[i], tol[i], _CMP_GT_OQ) | _mm512_cmp_ps_mask(l[i], ntol[i], _CMP_LT_OQ);
      __mmask16 in = far & _mm512_cmp_ps_mask(l[i], zero, _CMP_GT_OQ);
      const __mmask16 near = (__mmask16)(~far & inside);
      if (near) {
        if (!(have_exact >> i & 1)) exact[i] = exact_edge(s, i), have_exact |= 1 << i;
        in |= near & exact_inside_avx512(exact[i], px_double, exact[i].rb * (double)py);
      }
      inside &= in;
    }
    if (!inside) continue;
    const __m512 S = _mm512_add_ps(_mm512_add_ps(l[0], l[1]), l[2]);
    const __m512 zw =
        _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(l[0], z[0]), _mm512_mul_ps(l[1], z[1])), _mm512_mul_ps(l[2], z[2]));
    inside = _mm512_mask_cmp_ps_mask(inside, S, zero, _CMP_GT_OQ);
    inside = _mm512_mask_cmp_ps_mask(inside, zw, minus_one, _CMP_GE_OQ);
    inside = _mm512_mask_cmp_ps_mask(inside, zw, one, _CMP_LE_OQ);
    if (!inside) continue;
    // key_less(zw, id1, bz, bid), or nothing drawn yet.
    const int k = (y - sp.ya) * kTile;
    const __m512 bz = _mm512_load_ps(t.z + k);
    const __m512i bid = _mm512_load_si512(t.id + k);
    const __mmask16 empty = _mm512_cmpeq_epi32_mask(bid, _mm512_setzero_si512());
    const __mmask16 nearer = _mm512_cmp_ps_mask(zw, bz, _CMP_LT_OQ) |
                             (_mm512_cmp_ps_mask(zw, bz, _CMP_EQ_OQ) & _mm512_cmpgt_epi32_mask(bid, id1));
    const __mmask16 take = inside & (empty | nearer);
    _mm512_mask_store_ps(t.z + k, take, zw);
    _mm512_mask_store_epi32(t.id + k, take, id1);
    _mm512_mask_store_epi32(t.item + k, take, item);
  }
}

// write_group_avx2 for one whole tile row: pixels [x, x + 16) of row k / kTile. Returns false, having written
// nothing, where some drawn lane needs frag_attrs' double-precision path.
PRERAST_AVX512 inline bool write_group_avx512(const TileKeys& t, int k, const TriSetup* setups, const float* px_ndc,
                                              int x, float py, float two_w, float two_h, float* rast, float* db) {
  constexpr int stride = sizeof(TriSetup) / sizeof(float);
  const __m512i id = _mm512_load_si512(t.id + k);
  const __mmask16 drawn = _mm512_cmpgt_epi32_mask(id, _mm512_setzero_si512());
  const __m512 zero = _mm512_setzero_ps();
  if (drawn == 0) {
    for (int j = 0; j < 4; ++j) store_output_avx512(rast + 16 * j, zero);
    if (db)
      for (int j = 0; j < 4; ++j) store_output_avx512(db + 16 * j, zero);
    return true;
  }
  const __m512i items = _mm512_load_si512(t.item + k);
  const __m512i base = _mm512_mullo_epi32(items, _mm512_set1_epi32(stride));
  const float* s0 = (const float*)setups;
  // One triangle won the whole row (most rows, unless triangles are a few pixels across): broadcast its fields.
  const bool one_winner = drawn == 0xFFFF && _mm512_cmpeq_epi32_mask(items, _mm512_set1_epi32(t.item[k])) == 0xFFFF;
  const float* s1 = one_winner ? (const float*)(setups + t.item[k]) : s0;
#define PRERAST_FIELD(offset) \
  (one_winner ? _mm512_set1_ps(s1[offset]) : _mm512_mask_i32gather_ps(zero, drawn, base, s0 + (offset), 4))
  const __m512 px = _mm512_loadu_ps(px_ndc + x), pyv = _mm512_set1_ps(py);
  const __m512 dx = _mm512_sub_ps(px, PRERAST_FIELD(offsetof(TriSetup, ox) / 4));
  const __m512 dy = _mm512_sub_ps(pyv, PRERAST_FIELD(offsetof(TriSetup, oy) / 4));
  __m512 a[3], b[3], w[3], L[3];
  for (int i = 0; i < 3; ++i) {
    a[i] = PRERAST_FIELD(offsetof(TriSetup, a) / 4 + i), b[i] = PRERAST_FIELD(offsetof(TriSetup, b) / 4 + i);
    w[i] = PRERAST_FIELD(offsetof(TriSetup, bw) / 4 + i);
    const __m512 c = PRERAST_FIELD(offsetof(TriSetup, c) / 4 + i);
    const __m512 l = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(a[i], dx), _mm512_mul_ps(b[i], dy)), c);
    L[i] = _mm512_mul_ps(w[i], _mm512_max_ps(l, zero));  // max_ps(-0, 0) and max_ps(NaN, 0) give 0, as in AVX2
  }
#undef PRERAST_FIELD
  const __m512 S = _mm512_add_ps(_mm512_add_ps(L[0], L[1]), L[2]);
  const __mmask16 enough = _mm512_cmp_ps_mask(S, _mm512_set1_ps(kMinWeightedSum), _CMP_GE_OQ);
  if (drawn & ~enough) return false;
  const __m512 u = _mm512_maskz_div_ps(drawn, L[0], S), v = _mm512_maskz_div_ps(drawn, L[1], S);
  // encode_triangle_id on 16 lanes: n itself up to 2^24, else the float whose bit pattern is kTriangleIdBits + n.
  const __mmask16 big = _mm512_cmpgt_epi32_mask(id, _mm512_set1_epi32(1 << 24));
  const __m512 idf = _mm512_mask_blend_ps(
      big, _mm512_cvtepi32_ps(id), _mm512_castsi512_ps(_mm512_add_epi32(id, _mm512_set1_epi32(kTriangleIdBits))));
  const __m512 z = _mm512_maskz_mov_ps(drawn, _mm512_load_ps(t.z + k));
  store_interleaved_avx512(u, v, z, idf, rast);
  if (!db) return true;
  // frag_attrs_t: A = w a, B = w b, kx = 2 / W / (S * S), db = (kx (A0 S - L0 SA), ky (B0 S - L0 SB), ...).
  __m512 A[3], B[3];
  for (int i = 0; i < 3; ++i) A[i] = _mm512_mul_ps(w[i], a[i]), B[i] = _mm512_mul_ps(w[i], b[i]);
  const __m512 Sa = _mm512_add_ps(_mm512_add_ps(A[0], A[1]), A[2]), Sb = _mm512_add_ps(_mm512_add_ps(B[0], B[1]), B[2]);
  const __m512 S2 = _mm512_mul_ps(S, S);
  const __m512 kx = _mm512_div_ps(_mm512_set1_ps(two_w), S2), ky = _mm512_div_ps(_mm512_set1_ps(two_h), S2);
#define PRERAST_TERM(k_, e, li, Se) \
  _mm512_maskz_mul_ps(drawn, k_, _mm512_sub_ps(_mm512_mul_ps(e, S), _mm512_mul_ps(li, Se)))
  store_interleaved_avx512(PRERAST_TERM(kx, A[0], L[0], Sa), PRERAST_TERM(ky, B[0], L[0], Sb),
                           PRERAST_TERM(kx, A[1], L[1], Sa), PRERAST_TERM(ky, B[1], L[1], Sb), db);
#undef PRERAST_TERM
  return true;
}

}  // namespace prerast

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef PRERAST_AVX512
#endif
