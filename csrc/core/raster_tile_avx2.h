// AVX2 shading of one (triangle, tile) pair: eight pixels of a row at a time, with the arithmetic of frag_eval.
//
// Each lane computes lambda_i = (a_i * px + b_i * py) + c_i, S and z/w with the same float operations in the
// same order as edge_eval and frag_eval (separate multiplies and adds: AVX2 without FMA never contracts them),
// so every lane's values are bit-identical to the scalar ones. A lane whose lambda_i is within tol_i of 0, or
// NaN, is handed to the scalar draw_pixel, which re-decides it in double precision exactly as before.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define PRERAST_HAVE_AVX2_PATH 1
#include <immintrin.h>

#include "raster_tile.h"

namespace prerast {

inline bool cpu_has_avx2() { return __builtin_cpu_supports("avx2"); }

__attribute__((target("avx2"))) inline void draw_span_avx2(const TriSetup& s, int32_t setup_index,
                                                           const TileSpan& sp, const float* px_ndc, int H,
                                                           TileKeys& t) {
  const __m256 one = _mm256_set1_ps(1.0f), minus_one = _mm256_set1_ps(-1.0f), zero = _mm256_setzero_ps();
  __m256 a[3], c[3], tol[3], ntol[3], z[3];
  for (int i = 0; i < 3; ++i) {
    a[i] = _mm256_set1_ps(s.a[i]), c[i] = _mm256_set1_ps(s.c[i]), z[i] = _mm256_set1_ps(s.z[i]);
    tol[i] = _mm256_set1_ps(s.tol[i]), ntol[i] = _mm256_set1_ps(-s.tol[i]);
  }
  const __m256i id1 = _mm256_set1_epi32(s.tri + 1), item = _mm256_set1_epi32(setup_index);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo = _mm256_set1_epi32(sp.x0 - 1), hi = _mm256_set1_epi32(sp.x1 + 1);
  const int g0 = (sp.x0 - sp.xa) >> 3, g1 = (sp.x1 - sp.xa) >> 3;
  for (int y = sp.y0; y <= sp.y1; ++y) {
    const float py = pixel_center_ndc(y, H);
    __m256 bpy[3];
    for (int i = 0; i < 3; ++i) bpy[i] = _mm256_set1_ps(s.b[i] * py);
    for (int g = g0; g <= g1; ++g) {
      const int xg = sp.xa + 8 * g;
      const __m256i xs = _mm256_add_epi32(_mm256_set1_epi32(xg), lane);
      const __m256 in_span = _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(xs, lo), _mm256_cmpgt_epi32(hi, xs)));
      const __m256 px = _mm256_loadu_ps(px_ndc + xg);
      __m256 l[3], sure_in = in_span, sure_out = zero;
      for (int i = 0; i < 3; ++i) {
        l[i] = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(a[i], px), bpy[i]), c[i]);
        sure_in = _mm256_and_ps(sure_in, _mm256_cmp_ps(l[i], tol[i], _CMP_GT_OQ));
        sure_out = _mm256_or_ps(sure_out, _mm256_cmp_ps(l[i], ntol[i], _CMP_LT_OQ));
      }
      // Lanes in the span that are neither surely inside nor surely outside go through the exact path.
      int near_edge = _mm256_movemask_ps(_mm256_andnot_ps(_mm256_or_ps(sure_in, sure_out), in_span));
      while (near_edge) {
        const int j = __builtin_ctz(near_edge);
        near_edge &= near_edge - 1;
        draw_pixel(s, setup_index, sp, xg + j, y, px_ndc[xg + j], py, nullptr, t);
      }
      if (_mm256_movemask_ps(sure_in) == 0) continue;
      const __m256 S = _mm256_add_ps(_mm256_add_ps(l[0], l[1]), l[2]);
      const __m256 zw = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(l[0], z[0]), _mm256_mul_ps(l[1], z[1])),
                                      _mm256_mul_ps(l[2], z[2]));
      __m256 ok = _mm256_and_ps(sure_in, _mm256_cmp_ps(S, zero, _CMP_GT_OQ));
      ok = _mm256_and_ps(ok, _mm256_and_ps(_mm256_cmp_ps(zw, minus_one, _CMP_GE_OQ), _mm256_cmp_ps(zw, one, _CMP_LE_OQ)));
      if (_mm256_movemask_ps(ok) == 0) continue;
      // key_less(zw, id1, bz, bid), or nothing drawn yet.
      const int k = (y - sp.ya) * kTile + (xg - sp.xa);
      const __m256 bz = _mm256_load_ps(t.z + k);
      const __m256i bid = _mm256_load_si256((const __m256i*)(t.id + k));
      const __m256 empty = _mm256_castsi256_ps(_mm256_cmpeq_epi32(bid, _mm256_setzero_si256()));
      const __m256 id_less = _mm256_castsi256_ps(_mm256_cmpgt_epi32(bid, id1));
      const __m256 nearer = _mm256_or_ps(_mm256_cmp_ps(zw, bz, _CMP_LT_OQ),
                                         _mm256_and_ps(_mm256_cmp_ps(zw, bz, _CMP_EQ_OQ), id_less));
      const __m256 take = _mm256_and_ps(ok, _mm256_or_ps(empty, nearer));
      _mm256_store_ps(t.z + k, _mm256_blendv_ps(bz, zw, take));
      _mm256_store_si256((__m256i*)(t.id + k), _mm256_castps_si256(_mm256_blendv_ps(
          _mm256_castsi256_ps(bid), _mm256_castsi256_ps(id1), take)));
      const __m256 bitem = _mm256_load_ps((const float*)(t.item + k));
      _mm256_store_ps((float*)(t.item + k), _mm256_blendv_ps(bitem, _mm256_castsi256_ps(item), take));
    }
  }
}

}  // namespace prerast

#endif
