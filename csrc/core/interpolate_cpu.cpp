// CPU interpolation: pixels in parallel; the backward scatters into grad_attr deterministically (chunked_scatter).
#include <algorithm>

#include "interpolate.h"
#include "scatter_cpu.h"

namespace prerast {

void interpolate_forward_cpu(const InterpArgs& a, const ParallelFor& pfor) {
  const int64_t A = a.num_attrs, D = a.num_diff;
  pfor(a.num_pixels, 1024, [&](int64_t b, int64_t e) {
    for (int64_t pix = b; pix < e; ++pix) {
      InterpPixel p;
      const bool hit = interp_pixel(a, pix, p);
      float* o = a.out + pix * A;
      for (int64_t c = 0; c < A; ++c) o[c] = hit ? interp_value(a, p, c) : 0.0f;
      if (!a.out_da) continue;
      float* od = a.out_da + pix * 2 * D;
      for (int64_t k = 0; k < D; ++k) {
        float dx = 0.0f, dy = 0.0f;
        if (hit) interp_deriv(a, p, a.rast_db + pix * 4, k, dx, dy);
        od[2 * k] = dx, od[2 * k + 1] = dy;
      }
    }
  });
}

namespace {

// A grad_attr far larger than the pixels' work (many vertices, few pixels), or too large for copies, is split into
// one band of rows per thread instead of a copy per thread: every thread walks all pixels and adds only into its
// own band, so each element gets its contributions in pixel order, the same float sums for any thread count.
// grad_rast and grad_db are written by the thread whose share of the pixels they are in; for the other pixels a
// thread reads no attribute values.
void scatter_in_bands(const InterpArgs& a, int64_t attr_size, int bands, const ParallelFor& pfor) {
  InterpArgs attr_only = a;
  attr_only.grad_rast = attr_only.grad_db = nullptr;
  pfor(bands, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      // Bands end on attribute rows, so that a row is checked once per pixel.
      const int64_t rows = attr_size / std::max<int64_t>(a.num_attrs, 1);
      const int64_t begin = rows * t / bands * a.num_attrs, end = rows * (t + 1) / bands * a.num_attrs;
      const int64_t own_begin = a.num_pixels * t / bands, own_end = a.num_pixels * (t + 1) / bands;
      float* g = a.grad_attr;
      // Pixels a block at a time: their rows are looked up and prefetched first, so that the misses on grad_attr
      // overlap instead of being taken one after another.
      constexpr int kBlock = 16;
      InterpPixel block[kBlock];
      bool hits[kBlock];
      for (int64_t pix = 0; pix < a.num_pixels; ++pix) {
        const int k = (int)(pix % kBlock);
        if (k == 0)
          for (int i = 0; i < kBlock && pix + i < a.num_pixels; ++i) {
            hits[i] = interp_pixel(a, pix + i, block[i]);
            const bool owned = pix + i >= own_begin && pix + i < own_end;
            for (int j = 0; j < 3 && hits[i]; ++j) {
              const int64_t row = block[i].row[j];
              for (int64_t c = 0; c < a.num_attrs; c += 16) {
                if (row >= begin && row < end) __builtin_prefetch(g + row + c, 1);
                if (owned) __builtin_prefetch(a.attr + row + c, 0);  // read for grad_rast
              }
            }
          }
        const InterpPixel& p = block[k];
        const bool hit = hits[k];
        const bool own = pix >= own_begin && pix < own_end;
        if (!hit && !own) continue;
        bool in[3] = {false, false, false};
        for (int j = 0; j < 3 && hit; ++j) in[j] = p.row[j] >= begin && p.row[j] < end;
        if (!own && !(in[0] || in[1] || in[2])) continue;
        interp_backward_pixel(own ? a : attr_only, pix, hit, p, [&](int64_t c, const float* w) {
          if (!hit) return;
          for (int j = 0; j < 3; ++j)
            if (in[j]) g[p.row[j] + c] += w[j];
        });
      }
    }
  });
}

}  // namespace

void interpolate_backward_cpu(const InterpArgs& a, const ParallelFor& pfor, int num_chunks, int64_t max_extra_bytes) {
  const int64_t blocks = a.attr_per_image ? a.num_pixels / std::max<int64_t>(a.pixels_per_image, 1) : 1;
  const int64_t attr_size = blocks * a.num_vertices * a.num_attrs;
  // Double copies are twice the size of float ones: fewer of them fit max_extra_bytes.
  const int64_t size = std::max<int64_t>(attr_size, 1);
  const int wide_chunks = (int)std::max<int64_t>(1, std::min<int64_t>(num_chunks, max_extra_bytes / (size * 8)));
  const bool wide = wide_scatter(a.num_pixels * a.num_attrs, attr_size, wide_chunks, max_extra_bytes);
  const int chunks = wide ? wide_chunks : (int)std::min<int64_t>(num_chunks, 1 + max_extra_bytes / (size * 4));
  // Bands cost every extra thread a walk over all pixels (their triangles' indices miss the cache, some 16
  // elements' worth of summing copies); copies cost a few passes over grad_attr, or, when none fits, run serially.
  if (!wide && num_chunks > 1 && a.num_pixels >= 4096 &&
      (chunks == 1 || attr_size > 16 * a.num_pixels * (int64_t)(num_chunks - 1)))
    return scatter_in_bands(a, attr_size, num_chunks, pfor);
  chunked_scatter(wide, a.num_pixels, a.grad_attr, attr_size, chunks, pfor, [&](int64_t b, int64_t e, auto* g) {
    for (int64_t pix = b; pix < e; ++pix) {
      InterpPixel p;
      const bool hit = interp_pixel(a, pix, p);
      interp_backward_pixel(a, pix, hit, p, [&](int64_t c, const float* w) {
        if (!hit) return;
        for (int j = 0; j < 3; ++j) g[p.row[j] + c] += w[j];
      });
    }
  });
}

}  // namespace prerast
