// CPU texture sampling: the per-pixel math of texture.h in parallel loops.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "scatter_cpu.h"
#include "texture.h"

namespace prerast {

namespace {

// Spare copies of the level gradients (one per extra chunk of pixels) cost this many floats at most: above it,
// fewer chunks (down to one, serial) accumulate, so a 4096^2 texture does not need a copy per thread.
constexpr int64_t kMaxSpareGradFloats = (int64_t)64 << 20;

template <class Acc>
struct ChunkAdd {
  Acc* levels[kMaxMipLevels];
  void operator()(int level, int64_t i, float v) const { levels[level][i] += v; }
};

}  // namespace

void texture_forward_cpu(const TextureArgs& a, const ParallelFor& pfor) {
  pfor(a.num_pixels, 1024, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) texture_forward_pixel(a, p);
  });
}

void texture_backward_cpu(const TextureGradArgs& g, const ParallelFor& pfor, int num_threads) {
  const TextureArgs& a = g.a;
  const int64_t total = gradient_elements(a);
  // A spare copy of the level gradients costs about two passes over it (zeroing, summing); one is worth it only
  // when the pixels scatter more than that (up to 4 texels of C channels each).
  const int64_t spare_budget = std::min(kMaxSpareGradFloats, a.num_pixels * 4 * a.channels / 2);
  const int64_t chunks = std::min<int64_t>(std::max(num_threads, 1), spare_budget / std::max<int64_t>(total, 1) + 1);
  chunked_scatter(wide_texture_sums(a), a.num_pixels, g.grad_levels[0], total, (int)chunks, pfor,
                  [&](int64_t b, int64_t e, auto* dest) {
                    ChunkAdd<std::remove_pointer_t<decltype(dest)>> add;
                    for (int l = 0; l < a.num_levels; ++l) {
                      add.levels[l] = dest;
                      dest += level_elements(a, l);
                    }
                    for (int64_t p = b; p < e; ++p) texture_backward_pixel(g, p, add);
                  });
}

void mip_down_cpu(const float* src, int64_t B, int sh, int sw, int C, float* dst, const ParallelFor& pfor) {
  const int dh = mip_size(sh), dw = mip_size(sw);
  pfor(B * dh, std::max<int64_t>(1, 4096 / dw), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row)
      for (int x = 0; x < dw; ++x) mip_down_texel(src, sh, sw, C, dst, row / dh, (int)(row % dh), x);
  });
}

void mip_down_adjoint_cpu(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad,
                          const ParallelFor& pfor) {
  pfor(B * sh, std::max<int64_t>(1, 4096 / sw), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row)
      for (int x = 0; x < sw; ++x) mip_down_adjoint_texel(grad_next, sh, sw, C, grad, row / sh, (int)(row % sh), x);
  });
}

}  // namespace prerast
