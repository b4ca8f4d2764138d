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

void interpolate_backward_cpu(const InterpArgs& a, const ParallelFor& pfor, int num_chunks, int64_t max_extra_bytes) {
  const int64_t blocks = a.attr_per_image ? a.num_pixels / std::max<int64_t>(a.pixels_per_image, 1) : 1;
  const int64_t attr_size = blocks * a.num_vertices * a.num_attrs;
  // Double copies are twice the size of float ones: fewer of them fit max_extra_bytes.
  const int64_t size = std::max<int64_t>(attr_size, 1);
  const int wide_chunks = (int)std::max<int64_t>(1, std::min<int64_t>(num_chunks, max_extra_bytes / (size * 8)));
  const bool wide = wide_scatter(a.num_pixels * a.num_attrs, attr_size, wide_chunks, max_extra_bytes);
  const int chunks = wide ? wide_chunks : (int)std::min<int64_t>(num_chunks, 1 + max_extra_bytes / (size * 4));
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
