// CPU antialiasing: both passes over pixels in parallel. The pos gradient is scattered deterministically
// (chunked_scatter).
#include "antialias.h"
#include "scatter_cpu.h"

namespace prerast {

constexpr int kChannelsPerPass = 8;  // channels blended per visit of a pixel's pairs

void antialias_forward_cpu(const AntialiasArgs& a, const ParallelFor& pfor) {
  const int64_t pixels = a.num_images * a.height * a.width;
  pfor(pixels, 1024, [&](int64_t b, int64_t e) {
    for (int64_t pix = b; pix < e; ++pix)
      for (int dir = 0; dir < 2; ++dir) a.crossing[2 * pix + dir] = pair_tau(a, pix, dir);
  });
  pfor(pixels, 1024, [&](int64_t b, int64_t e) {
    for (int64_t pix = b; pix < e; ++pix)
      for (int64_t c = 0; c < a.channels; c += kChannelsPerPass)
        antialias_values<kChannelsPerPass>(a, pix, c, a.out + pix * a.channels);
  });
}

void antialias_backward_cpu(const AntialiasArgs& a, const ParallelFor& pfor, int num_chunks) {
  const int64_t pixels = a.num_images * a.height * a.width;
  pfor(pixels, 1024, [&](int64_t b, int64_t e) {
    for (int64_t pix = b; pix < e; ++pix)
      for (int64_t c = 0; c < a.channels; c += kChannelsPerPass)
        antialias_color_grads<kChannelsPerPass>(a, pix, c, a.grad_color + pix * a.channels);
  });
  if (!a.grad_pos) return;
  const int64_t pos_size = (a.instanced ? a.num_images : 1) * a.num_vertices * 4;
  const bool wide = wide_scatter(pixels * 4, pos_size, num_chunks, kKeptScatterBytes);
  chunked_scatter(wide, pixels, a.grad_pos, pos_size, num_chunks, pfor, [&](int64_t b, int64_t e, auto* g) {
    for (int64_t pix = b; pix < e; ++pix)
      for (int dir = 0; dir < 2; ++dir) antialias_pos_backward(a, pix, dir, [g](int64_t i, float v) { g[i] += v; });
  });
}

}  // namespace prerast
