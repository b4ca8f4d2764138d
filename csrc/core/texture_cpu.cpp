// CPU texture sampling: the per-pixel math of texture.h in parallel loops.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "host_builtins.h"
#include "kernel_entry.h"
#include "scatter_cpu.h"
#include "texture.h"

namespace prerast {

namespace {

// Spare copies of the level gradients (one per extra chunk of pixels) cost this many floats at most: above it,
// fewer chunks (down to one, serial) accumulate, so a 4096^2 texture does not need a copy per thread.
constexpr int64_t kMaxSpareGradFloats = (int64_t)64 << 20;

// Where each level's gradient starts in the one buffer that holds them back to back.
struct LevelStarts {
  int64_t at[kMaxMipLevels] = {};
  explicit LevelStarts(const TextureArgs& a) {
    for (int l = 1; l < a.num_levels; ++l) at[l] = at[l - 1] + level_elements(a, l - 1);
  }
};

// Adds a pixel's contributions into the elements [begin, end) of the level gradients at `base`, a batch at a
// time: the pixel math first records them, then one tight loop applies them in the same order. The additions land
// all over a texture larger than the cache; spelled out inside the pixel math, each one's write miss held up the
// stores behind it and the misses were taken one at a time (the scatter ran at a quarter of the forward's speed).
template <class Acc>
struct BatchedAdd {
  static constexpr int kBatch = 256;
  static constexpr int kAhead = 16;  // prefetch distance, in additions
  struct Pending {
    Acc* at;
    float v;
  };
  Acc* base;
  const LevelStarts& starts;
  int64_t begin, end;
  Pending pending[kBatch];
  int count = 0;

  BatchedAdd(Acc* base, const LevelStarts& starts, int64_t begin, int64_t end)
      : base(base), starts(starts), begin(begin), end(end) {}
  ~BatchedAdd() { flush(); }
  void operator()(int level, int64_t i, float v) {
    const int64_t k = starts.at[level] + i;
    if (k < begin || k >= end) return;
    pending[count++] = {base + k, v};
    if (count == kBatch) flush();
  }
  void flush() {
    for (int j = 0; j < count; ++j) {
      if (j + kAhead < count) prefetch_for_write(pending[j + kAhead].at);
      *pending[j].at += pending[j].v;
    }
    count = 0;
  }
};

// Counts the additions of a sample of the pixels into bins of the level gradients' elements.
struct BinCount {
  const LevelStarts& starts;
  int64_t total;
  std::vector<int64_t>* bins;
  void operator()(int level, int64_t i, float) const {
    (*bins)[(size_t)((starts.at[level] + i) * (int64_t)bins->size() / total)] += 1;
  }
};

// A texture gradient too large for a spare copy per thread is split into one band of elements per thread: every
// thread walks all pixels but adds only into its own band, so each element still gets its contributions in pixel
// order (the same float sums as one thread's, whatever the thread count) and nothing is copied. The bands hold
// equal shares of the additions of every 16th pixel, since a scene samples some parts of a texture far more than
// others. The pixels' own gradients (uv, uv_da, bias) are written by the thread whose share of the pixels they
// are in; for the others a thread skips the texel reads that only those gradients need.
void scatter_in_bands(const TextureGradArgs& g, int64_t total, int bands, const ParallelFor& pfor) {
  const TextureArgs& a = g.a;
  TextureGradArgs texture_only = g;
  texture_only.grad_uv = texture_only.grad_uv_da = texture_only.grad_bias = nullptr;
  const LevelStarts starts(a);

  std::vector<int64_t> bins(1024, 0);
  BinCount count{starts, total, &bins};
  for (int64_t p = 0; p < a.num_pixels; p += 16) texture_backward_pixel(texture_only, p, count);
  int64_t adds = 0;
  for (int64_t c : bins) adds += c;
  std::vector<int64_t> edge(bands + 1, total);
  edge[0] = 0;
  for (int64_t bin = 0, seen = 0, t = 1; bin < (int64_t)bins.size() && t < bands; ++bin) {
    seen += bins[bin];
    while (t < bands && seen * bands >= adds * t) edge[t++] = total * (bin + 1) / (int64_t)bins.size();
  }

  pfor(bands, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      BatchedAdd<float> add(g.grad_levels[0], starts, edge[t], edge[t + 1]);
      const int64_t own_begin = a.num_pixels * t / bands, own_end = a.num_pixels * (t + 1) / bands;
      for (int64_t p = 0; p < a.num_pixels; ++p)
        texture_backward_pixel(p >= own_begin && p < own_end ? g : texture_only, p, add);
    }
  });
}

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
  const bool wide = wide_texture_sums(a);
  if (chunks == 1 && num_threads > 1 && !wide && a.num_pixels >= 4096)
    return scatter_in_bands(g, total, num_threads, pfor);
  const LevelStarts starts(a);
  chunked_scatter(wide, a.num_pixels, g.grad_levels[0], total, (int)chunks, pfor,
                  [&](int64_t b, int64_t e, auto* dest) {
                    BatchedAdd<std::remove_pointer_t<decltype(dest)>> add(dest, starts, 0, total);
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

void mip_down_adjoint_cpu(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad, bool accumulate,
                          const ParallelFor& pfor) {
  pfor(B * sh, std::max<int64_t>(1, 4096 / sw), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row)
      mip_down_adjoint_row(grad_next, sh, sw, C, grad, row / sh, (int)(row % sh), 0, sw, accumulate);
  });
}

}  // namespace prerast

// The entry points of the kernel library (kernel_entry.h).
namespace prerast {

PRERAST_CPU_ENTRY(texture_forward_cpu, TextureArgs, a, k) { texture_forward_cpu(a, k.pfor); }
PRERAST_CPU_ENTRY(texture_backward_cpu, TextureGradArgs, g, k) { texture_backward_cpu(g, k.pfor, k.num_threads); }
PRERAST_CPU_ENTRY(mip_down_cpu, MipArgs, m, k) {
  mip_down_cpu(m.src, m.batch, m.height, m.width, m.channels, m.dst, k.pfor);
}
PRERAST_CPU_ENTRY(mip_down_adjoint_cpu, MipArgs, m, k) {
  mip_down_adjoint_cpu(m.src, m.batch, m.height, m.width, m.channels, m.dst, m.accumulate, k.pfor);
}

}  // namespace prerast
