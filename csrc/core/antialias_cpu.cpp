// CPU antialiasing: both passes over pixels in parallel. The pos gradient is scattered deterministically (per-chunk
// copies summed in a fixed order, or bands of pos, one per thread).
#include <algorithm>
#include <memory>
#include <type_traits>

#include "antialias.h"
#include "channel_count.h"
#include "kernel_entry.h"
#include "scatter_cpu.h"

namespace prerast {

constexpr int kChannelsPerPass = 8;  // channels blended per visit of a pixel's pairs

namespace {

// body(pix, x, y) for every pixel, in parallel over rows: the pixel's column and row come from the loops, not from
// two 64-bit divisions per pixel (which were most of the passes' time).
template <class Body>
void for_pixels(const AntialiasArgs& a, const ParallelFor& pfor, Body body) {
  const int64_t W = a.width, H = a.height;
  pfor(a.num_images * H, std::max<int64_t>(1, 1024 / std::max<int64_t>(W, 1)), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int y = (int)(row % H);
      for (int x = 0; x < (int)W; ++x) body(row * W + x, x, y);
    }
  });
}

}  // namespace

void antialias_forward_cpu(const AntialiasArgs& a, const ParallelFor& pfor) {
  // A pair whose pixels show one ID, or one off the image, is not blended (pair_crossing's first tests): most are,
  // and they are told here without the pixel index arithmetic.
  for_pixels(a, pfor, [&](int64_t pix, int x, int y) {
    const bool right = x + 1 < a.width, up = y + 1 < a.height;
    const float id = a.rast[pix * 4 + 3];
    a.crossing[2 * pix] = right && a.rast[(pix + 1) * 4 + 3] != id ? pair_tau(a, pix, 0) : -1.0f;
    a.crossing[2 * pix + 1] = up && a.rast[(pix + a.width) * 4 + 3] != id ? pair_tau(a, pix, 1) : -1.0f;
  });
  with_channels(a.channels, [&](auto channels) {
    for_pixels(a, pfor, [&](int64_t pix, int x, int y) {
      for (int64_t c = 0; c < a.channels; c += kChannelsPerPass)
        antialias_values<kChannelsPerPass, decltype(channels)::value>(a, pix, x, y, c, a.out + pix * a.channels);
    });
  });
}

namespace {

// What one pair adds to pos: at most six elements (two vertices' x, y, w).
struct PairAdds {
  int n;  // set for every pair by the parallel pass (no serial zeroing of the array first)
  int64_t index[6];
  float value[6];
};

// A pos far larger than the image (many vertices, few pixels) would cost every thread a copy of it, and summing
// the copies more than the pairs' work. Instead the pairs' additions are worked out in parallel and kept, then pos
// is split into one band of vertices per thread, and every thread adds the additions that fall in its band, in pair
// order: each element gets the same sums in the same order as on one thread.
void scatter_in_bands(const AntialiasArgs& a, int64_t pixels, int64_t pos_size, int bands, const ParallelFor& pfor) {
  std::unique_ptr<PairAdds[]> adds(new PairAdds[2 * pixels]);
  pfor(pixels, 1024, [&](int64_t b, int64_t e) {
    for (int64_t pix = b; pix < e; ++pix)
      for (int dir = 0; dir < 2; ++dir) {
        PairAdds& pa = adds[2 * pix + dir];
        pa.n = 0;
        antialias_pos_backward(a, pix, dir,
                               [&pa](int64_t i, float v) { pa.index[pa.n] = i, pa.value[pa.n] = v, ++pa.n; });
      }
  });
  const int64_t rows = pos_size / 4;
  pfor(bands, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t begin = rows * t / bands * 4, end = rows * (t + 1) / bands * 4;
      for (int64_t q = 0; q < 2 * pixels; ++q)
        for (int k = 0; k < adds[q].n; ++k) {
          const int64_t i = adds[q].index[k];
          if (i >= begin && i < end) a.grad_pos[i] += adds[q].value[k];
        }
    }
  });
}

}  // namespace

void antialias_backward_cpu(const AntialiasArgs& a, const ParallelFor& pfor, int num_chunks) {
  const int64_t pixels = a.num_images * a.height * a.width;
  with_channels(a.channels, [&](auto channels) {
    for_pixels(a, pfor, [&](int64_t pix, int x, int y) {
      for (int64_t c = 0; c < a.channels; c += kChannelsPerPass)
        antialias_color_grads<kChannelsPerPass, decltype(channels)::value>(a, pix, x, y, c,
                                                                           a.grad_color + pix * a.channels);
    });
  });
  if (!a.grad_pos) return;
  const int64_t pos_size = (a.instanced ? a.num_images : 1) * a.num_vertices * 4;
  const bool wide = wide_scatter(pixels * 4, pos_size, num_chunks, kKeptScatterBytes);
  // Bands cost every thread a pass over the pairs' kept additions.
  if (!wide && bands_over_copies(pos_size, pixels, num_chunks))
    return scatter_in_bands(a, pixels, pos_size, num_chunks, pfor);
  chunked_scatter(wide, pixels, a.grad_pos, pos_size, num_chunks, pfor, [&](int64_t b, int64_t e, auto* g) {
    for (int64_t pix = b; pix < e; ++pix)
      for (int dir = 0; dir < 2; ++dir) antialias_pos_backward(a, pix, dir, [g](int64_t i, float v) { g[i] += v; });
  });
}

}  // namespace prerast

// The entry points of the kernel library (kernel_entry.h).
namespace prerast {

PRERAST_CPU_ENTRY(antialias_forward_cpu, AntialiasArgs, a, k) { antialias_forward_cpu(a, k.pfor); }
PRERAST_CPU_ENTRY(antialias_backward_cpu, AntialiasArgs, a, k) { antialias_backward_cpu(a, k.pfor, k.num_threads); }

}  // namespace prerast
