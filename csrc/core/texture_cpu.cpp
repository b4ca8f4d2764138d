// CPU texture sampling: the per-pixel math of texture.h in parallel loops.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "host_builtins.h"
#include "channel_count.h"
#include "kernel_entry.h"
#include "scatter_cpu.h"
#include "texture.h"

namespace prerast {

namespace {

// The per-pixel math is made of many small helpers, shared with the GPU; GCC left the larger ones (the tap visits,
// boundary_index, the scatter's records) as calls, each passing its arguments through memory. A block of pixels is
// compiled as one function instead; the scatter's flush stays a call (noinline), as it runs once per batch.
#if defined(__GNUC__) || defined(__clang__)
#define PRERAST_FLATTEN __attribute__((flatten))
#define PRERAST_NOINLINE __attribute__((noinline))
#else
#define PRERAST_FLATTEN
#define PRERAST_NOINLINE
#endif

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
// A record holds up to one texel's channels (kChannelBlock), so that a tap costs one record, not one per channel.
// kWhole > 0: every texel lies wholly in [begin, end) (no bands) and has kWhole channels, so records need no count.
template <class Acc, int kWhole = 0>
struct BatchedAdd {
  static constexpr int kBatch = 128;
  static constexpr int kAhead = 8;  // prefetch distance, in records
  struct Pending {
    Acc* at;
    int n;
    float v[kChannelBlock];
  };
  Acc* base;
  const LevelStarts& starts;
  int64_t begin, end;
  Pending pending[kBatch];
  int count = 0;

  BatchedAdd(Acc* base, const LevelStarts& starts, int64_t begin, int64_t end)
      : base(base), starts(starts), begin(begin), end(end) {}
  ~BatchedAdd() { flush(); }
  // Adds w * g[j] to elements i + j (j < nc <= kChannelBlock) of the level's gradient, those in [begin, end); g
  // holds kChannelBlock floats.
  void texel(int level, int64_t i, float w, const float* g, int nc) {
    const int64_t k = starts.at[level] + i;
    if (kWhole) {
      Pending& r = pending[count++];
      r.at = base + k;
      for (int j = 0; j < kWhole; ++j) r.v[j] = w * g[j];
      if (count == kBatch) flush();
      return;
    }
    const int lo = k < begin ? (int)std::min<int64_t>(begin - k, nc) : 0;
    const int hi = k + nc > end ? (int)std::max<int64_t>(end - k, lo) : nc;
    if (lo == hi) return;
    Pending& r = pending[count++];
    r.at = base + k + lo, r.n = hi - lo;
    for (int j = lo; j < hi; ++j) r.v[j - lo] = w * g[j];
    if (count == kBatch) flush();
  }
  void operator()(int level, int64_t i, float v) {
    const float g[kChannelBlock] = {v, 0.0f, 0.0f, 0.0f};
    texel(level, i, 1.0f, g, 1);
  }
  PRERAST_NOINLINE void flush() {
    for (int j = 0; j < count; ++j) {
      const Pending& ahead = pending[j + kAhead < count ? j + kAhead : j];
      prefetch_for_write(ahead.at);
      prefetch_for_write(ahead.at + (kWhole ? kWhole : ahead.n) - 1);
      const Pending& r = pending[j];
      for (int c = 0; c < (kWhole ? kWhole : r.n); ++c) r.at[c] += r.v[c];
    }
    count = 0;
  }
};

template <class Acc, int kWhole>
void add_texel(BatchedAdd<Acc, kWhole>& add, int level, int64_t i, float w, const float* g, int nc) {
  add.texel(level, i, w, g, nc);
}

// log2_float of n values, the same bits: a normal positive float is 2^e times a mantissa that is already the m of
// log2_float as a double, so it takes a branch-free path that the compiler vectorises (the series' long chain of
// dependent double operations, one pixel at a time, kept the setup waiting on latency); others go through
// log2_float itself.
template <int kMax>
void log2_floats(const float* x, float* out, int n) {
  uint32_t bits[kMax];
  memcpy(bits, x, sizeof(float) * n);
  for (int i = 0; i < n; ++i) {
    // m, halved above sqrt(2) (whose float mantissa is 0x3504f3), built as the double's two 32-bit halves: in
    // integers, with selects, which the compiler vectorises with plain SSE2, where a double comparison and a
    // multiply stayed a branch.
    const uint32_t b = bits[i], mantissa = b & 0x7fffffu;
    const bool half = mantissa > 0x3504f3u;
    const uint64_t m_bits = (uint64_t)((mantissa >> 3) | (half ? 0x3fe00000u : 0x3ff00000u)) << 32 | (b << 29);
    const double m = bit_cast<double>(m_bits);
    const int e = (int)(b >> 23 & 0xffu) - 127 + (half ? 1 : 0);
    const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double p = 1.0 / 23.0;
    p = p * s2 + 1.0 / 21.0, p = p * s2 + 1.0 / 19.0, p = p * s2 + 1.0 / 17.0, p = p * s2 + 1.0 / 15.0;
    p = p * s2 + 1.0 / 13.0, p = p * s2 + 1.0 / 11.0, p = p * s2 + 1.0 / 9.0, p = p * s2 + 1.0 / 7.0;
    p = p * s2 + 1.0 / 5.0, p = p * s2 + 1.0 / 3.0, p = p * s2 + 1.0;
    out[i] = (float)((double)e + 2.8853900817779268 * s * p);
  }
  for (int i = 0; i < n; ++i)
    if (!(x[i] >= 1.17549435e-38f && x[i] < INFINITY)) out[i] = log2_float(x[i]);
}

// pixel_setup for the pixels [p0, p0 + n) into ps, the logarithms of all of them at once (of those whose LOD needs
// them: empty pixels, with no footprint, do not).
constexpr int kSetupBlock = 64;
template <class Wanted>
void pixel_setup_block(const TextureArgs& a, int64_t p0, int n, PixelSample* ps, Wanted wanted) {
  float lod[kSetupBlock], m[kSetupBlock], k[kSetupBlock], log2_m[kSetupBlock], log2_k[kSetupBlock];
  int state[kSetupBlock], slot[kSetupBlock], pending = 0;
  for (int i = 0; i < n; ++i) {
    ps[i] = PixelSample();
    state[i] = wanted(p0 + i) ? pixel_setup_start(a, p0 + i, ps[i], lod[i], m[pending], k[pending]) : kLodNone;
    slot[i] = pending;
    pending += state[i] == kLodPending;
  }
  log2_floats<kSetupBlock>(m, log2_m, pending);
  log2_floats<kSetupBlock>(k, log2_k, pending);
  for (int i = 0; i < n; ++i)
    if (state[i] != kLodNone)
      pixel_setup_finish(a, p0 + i, ps[i],
                         state[i] == kLodPending ? lod_from_terms(log2_m[slot[i]], log2_k[slot[i]]) : lod[i]);
}

// body(pix, p) for the pixels [b, e) with their setups, a block at a time; wanted(pix) false: p left as constructed.
template <class Wanted, class Body>
PRERAST_FLATTEN void for_pixel_samples(const TextureArgs& a, int64_t b, int64_t e, Wanted wanted, Body body) {
  PixelSample ps[kSetupBlock];
  for (int64_t p0 = b; p0 < e; p0 += kSetupBlock) {
    const int n = (int)std::min<int64_t>(kSetupBlock, e - p0);
    pixel_setup_block(a, p0, n, ps, wanted);
    for (int i = 0; i < n; ++i) body(p0 + i, ps[i]);
  }
}

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
      with_channels(a.channels, [&](auto channels) {
        for_pixel_samples(
            a, 0, a.num_pixels, [&](int64_t p) { return any_output_gradient(g, p); },
            [&](int64_t p, const PixelSample& ps) {
              texture_backward_sample<decltype(channels)::value>(p >= own_begin && p < own_end ? g : texture_only, p,
                                                                 ps, add);
            });
      });
    }
  });
}

}  // namespace

void texture_forward_cpu(const TextureArgs& a, const ParallelFor& pfor) {
  with_channels(a.channels, [&](auto channels) {
    pfor(a.num_pixels, 1024, [&](int64_t b, int64_t e) {
      for_pixel_samples(
          a, b, e, [](int64_t) { return true; },
          [&](int64_t p, const PixelSample& ps) { texture_forward_sample<decltype(channels)::value>(a, p, ps); });
    });
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
  chunked_scatter(
      wide, a.num_pixels, g.grad_levels[0], total, (int)chunks, pfor, [&](int64_t b, int64_t e, auto* dest) {
        with_channels(a.channels, [&](auto channels) {
          BatchedAdd<std::remove_pointer_t<decltype(dest)>, decltype(channels)::value> add(dest, starts, 0, total);
          for_pixel_samples(
              a, b, e, [&](int64_t p) { return any_output_gradient(g, p); },
              [&](int64_t p, const PixelSample& ps) {
                texture_backward_sample<decltype(channels)::value>(g, p, ps, add);
              });
        });
      });
}

namespace {

// Row y of image b of mip_down: mip_down_texel's sums, with the common 2 x 2 texels (every one but the last of an
// odd width, in rows of two source rows) spelled out over known channels (kC; 0: C), where the compiler keeps them
// in registers, instead of finding each texel's span and looping over its rows, columns and channels.
template <int kC>
void mip_down_row(const float* src, int sh, int sw, int C_, float* dst, int64_t b, int y) {
  const int C = kC ? kC : C_;
  const int dw = mip_size(sw);
  int y0, ny;
  mip_span(sh, y, y0, ny);
  int x = 0;
  if (ny == 2 && sw > 1) {
    const float* r0 = src + (b * sh + y0) * (int64_t)sw * C;
    const float* r1 = r0 + (int64_t)sw * C;
    float* o = dst + (b * mip_size(sh) + y) * (int64_t)dw * C;
    const int plain = (sw & 1) ? dw - 1 : dw;
    for (; x < plain; ++x)
      for (int c = 0; c < C; ++c) {
        const int64_t i = 2 * (int64_t)x * C + c;
        float sum = 0.0f;  // the same additions in the same order as mip_down_texel's
        sum += r0[i], sum += r0[i + C], sum += r1[i], sum += r1[i + C];
        o[(int64_t)x * C + c] = sum * 0.25f;
      }
  }
  for (; x < dw; ++x) mip_down_texel(src, sh, sw, C, dst, b, y, x);
}

// Row y of image b of mip_down's adjoint, as mip_down_adjoint_row: the source texels of a next-level texel in one
// go (two, or three at the end of an odd width), over known channels.
template <int kC>
void mip_down_adjoint_row_cpu(const float* grad_next, int sh, int sw, int C_, float* grad, int64_t b, int y,
                              bool accumulate) {
  const int C = kC ? kC : C_;
  if (sw == 1) return mip_down_adjoint_row(grad_next, sh, sw, C, grad, b, y, 0, sw, accumulate);
  const int dh = mip_size(sh), dw = mip_size(sw);
  const int py = sh == 1 ? 0 : (y / 2 < dh - 1 ? y / 2 : dh - 1);
  int y0, ny;
  mip_span(sh, py, y0, ny);
  const float* g_row = grad_next + (b * dh + py) * (int64_t)dw * C;
  float* o = grad + (b * sh + y) * (int64_t)sw * C;
  for (int px = 0; px < dw; ++px) {
    const int count = px == dw - 1 ? sw - 2 * px : 2;  // 2, or 3 at the end of an odd width
    const float s = 1.0f / (float)(ny * count);
    const float* g = g_row + (int64_t)px * C;
    float* t = o + 2 * (int64_t)px * C;
    for (int k = 0; k < count; ++k, t += C)
      if (accumulate)
        for (int c = 0; c < C; ++c) t[c] += g[c] * s;
      else
        for (int c = 0; c < C; ++c) t[c] = g[c] * s;
  }
}

}  // namespace

void mip_down_cpu(const float* src, int64_t B, int sh, int sw, int C, float* dst, const ParallelFor& pfor) {
  const int dh = mip_size(sh), dw = mip_size(sw);
  with_channels(C, [&](auto channels) {
    pfor(B * dh, std::max<int64_t>(1, 4096 / dw), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row)
        mip_down_row<decltype(channels)::value>(src, sh, sw, C, dst, row / dh, (int)(row % dh));
    });
  });
}

void mip_down_adjoint_cpu(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad, bool accumulate,
                          const ParallelFor& pfor) {
  with_channels(C, [&](auto channels) {
    pfor(B * sh, std::max<int64_t>(1, 4096 / sw), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row)
        mip_down_adjoint_row_cpu<decltype(channels)::value>(grad_next, sh, sw, C, grad, row / sh, (int)(row % sh),
                                                            accumulate);
    });
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
