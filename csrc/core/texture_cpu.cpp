// CPU texture sampling: the per-pixel math of texture.h in parallel loops.
#include <algorithm>
#include <vector>

#include "texture.h"

namespace prerast {

namespace {

// Spare gradient buffers for the texture levels cost this many floats at most: above it, fewer chunks (down to
// one, serial) accumulate, so a 4096^2 texture does not need a copy per thread.
constexpr int64_t kMaxSpareGradFloats = (int64_t)64 << 20;

int64_t level_elements(const TextureArgs& a, int level) {
  return a.tex_batch * tex_faces(a) * (int64_t)a.levels[level].height * a.levels[level].width * a.channels;
}

struct ChunkAdd {
  float* const* levels;
  void operator()(int level, int64_t i, float v) const { levels[level][i] += v; }
};

}  // namespace

void texture_forward_cpu(const TextureArgs& a, const ParallelFor& pfor) {
  pfor(a.num_pixels, 1024, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) texture_forward_pixel(a, p);
  });
}

void texture_backward_cpu(const TextureGradArgs& g, const ParallelFor& pfor, int num_threads) {
  // Each chunk of pixels scatters into its own copy of the level gradients; the copies are summed in a fixed
  // order, so the result does not depend on thread scheduling.
  const TextureArgs& a = g.a;
  int64_t total = 0;
  for (int l = 0; l < a.num_levels; ++l) total += level_elements(a, l);
  // A spare copy costs about two passes over it (zeroing, summing); one is worth it only when the pixels
  // scatter more than that (up to 4 texels of C channels each).
  const int64_t scatter = a.num_pixels * 4 * a.channels;
  const int64_t spare_budget = std::min(kMaxSpareGradFloats, scatter / 2);
  int64_t chunks = std::min<int64_t>(std::max(num_threads, 1), a.num_pixels / 4096 + 1);
  chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, spare_budget / std::max<int64_t>(total, 1) + 1));
  std::vector<float> spare((size_t)((chunks - 1) * total), 0.0f);
  pfor(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      float* levels[kMaxMipLevels] = {};
      float* base = c == 0 ? nullptr : spare.data() + (c - 1) * total;
      for (int l = 0; l < a.num_levels; ++l) {
        levels[l] = c == 0 ? g.grad_levels[l] : base;
        if (base) base += level_elements(a, l);
      }
      ChunkAdd add{levels};
      const int64_t p0 = a.num_pixels * c / chunks, p1 = a.num_pixels * (c + 1) / chunks;
      for (int64_t p = p0; p < p1; ++p) texture_backward_pixel(g, p, add);
    }
  });
  for (int64_t c = 1; c < chunks; ++c) {
    const float* src = spare.data() + (c - 1) * total;
    for (int l = 0; l < a.num_levels; ++l) {
      const int64_t n = level_elements(a, l);
      float* dst = g.grad_levels[l];
      pfor(n, 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] += src[i];
      });
      src += n;
    }
  }
}

// Both loops run over rows so that the flat index is split into (image, row) once per row, not per texel.
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
