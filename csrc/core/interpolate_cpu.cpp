// CPU interpolation: pixels in parallel; the backward scatters into grad_attr deterministically (per-chunk copies
// summed in a fixed order, or bands of grad_attr, one per thread).
#include <algorithm>
#include <cstring>
#include <vector>

#include "host_builtins.h"
#include "interpolate.h"
#include "kernel_entry.h"
#include "scatter_cpu.h"
#if defined(__SSE__) && defined(PRERAST_GNU_BUILTINS)
#include <xmmintrin.h>
#define PRERAST_SSE_TRANSPOSE 1
#endif

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

// The float-to-double sums below are written on Float2, Double2 and Float4 (host_builtins.h): element by element,
// they stay scalar.

template <class Vec>
Vec load(const float* p) {
  Vec x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

// grad_rast's (u, v) of four pixels at once, pixel q's in lane q: the sums over attributes c of g[c] (A0 - A2)[c]
// and g[c] (A1 - A2)[c], in attribute order as interp_backward_pixel sums them. go: the first pixel's grad_out.
inline void rast_grads_of_four(const float* go, int64_t A, const float* d0, const float* d1, Float4& gu, Float4& gv) {
  gu = Float4{}, gv = Float4{};
  int64_t c = 0;
  for (; c + 4 <= A; c += 4) {
    // The four pixels' next four attributes, transposed: col[k] holds attribute c + k of the four pixels.
#if defined(PRERAST_SSE_TRANSPOSE)
    __m128 r0 = _mm_loadu_ps(go + c), r1 = _mm_loadu_ps(go + A + c);
    __m128 r2 = _mm_loadu_ps(go + 2 * A + c), r3 = _mm_loadu_ps(go + 3 * A + c);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    const Float4 col[4] = {r0, r1, r2, r3};
#else
    Float4 col[4];
    for (int k = 0; k < 4; ++k) col[k] = float4(go[c + k], go[A + c + k], go[2 * A + c + k], go[3 * A + c + k]);
#endif
    for (int k = 0; k < 4; ++k) gu += col[k] * d0[c + k], gv += col[k] * d1[c + k];
  }
  for (; c < A; ++c) {
    const Float4 col = float4(go[c], go[A + c], go[2 * A + c], go[3 * A + c]);
    gu += col * d0[c], gv += col * d1[c];
  }
}

// Runs shorter than this add each pixel's gradient to g directly.
constexpr int64_t kMinRun = 8;
// Pixels are looked up (and their rows prefetched) kAhead to 2 kAhead ahead of the one being added.
constexpr int64_t kAhead = 16;

// Which part of the work one thread does: the pixels whose grad_rast and grad_db it writes, and the elements of g
// it adds into (a band of whole rows).
struct Share {
  int64_t own_begin, own_end;    // pixels
  int64_t band_begin, band_end;  // elements of g
};

// The attribute gradient of pixels [b, e), added into g (grad_attr or a chunk's copy of it) where it falls in the
// share's band, and the grad_rast and grad_db of the share's own pixels.
//
// Neighbouring pixels mostly show the same triangle, and so add into the same three attribute rows: a run of them
// is summed in double first, pixel after pixel, and added to g once. Runs depend on the pixels alone, so a band's
// elements get the same sums in the same order whichever thread adds them. grad_rast and grad_db get the same
// per-pixel arithmetic as interp_backward_pixel's.
template <class Acc>
class RunScatter {
 public:
  RunScatter(const InterpArgs& a, Acc* g, Share share)
      : a_(a),
        g_(g),
        s_(share),
        vecs_(a.num_attrs / 2),
        sums_(3 * vecs_),
        tail_(3 * (a.num_attrs % 2)),
        diff_(3 * a.num_diff),
        d0_(a.num_attrs),
        d1_(a.num_attrs) {
    attr_only_ = a;
    attr_only_.grad_rast = attr_only_.grad_db = nullptr;
  }

  void pixels(int64_t b, int64_t e) {
    int64_t ahead = b;  // pixels before this are looked up
    for (int64_t pix = b; pix < e;) {
      if (ahead < pix + kAhead)
        for (ahead = std::max(ahead, pix); ahead < std::min(e, pix + 2 * kAhead); ++ahead) look_up(ahead);
      if (!hits_[pix % (2 * kAhead)]) {  // background: zero gradients, nothing to add
        if (writes(pix)) zero_pixel_grads(pix);
        ++pix;
        continue;
      }
      InterpPixel p = ring_[pix % (2 * kAhead)];
      const int64_t end = run_end(pix, e);
      bool in[3];
      for (int j = 0; j < 3; ++j) in[j] = in_band(p.row[j]);
      const bool adds = in[0] || in[1] || in[2];
      if (!adds && (end <= s_.own_begin || pix >= s_.own_end)) {
        pix = end;
      } else if (end - pix < kMinRun) {
        for (; pix < end; ++pix) {
          const bool own = writes(pix);
          if (!adds && !own) continue;
          const float* r = a_.rast + pix * 4;  // the same triangle, this pixel's barycentrics
          p.u = r[0], p.v = r[1], p.w = (1.0f - r[0]) - r[1];
          interp_backward_pixel(own ? a_ : attr_only_, pix, true, p, [&](int64_t c, const float* w) {
            for (int j = 0; j < 3; ++j)
              if (in[j]) g_[p.row[j] + c] += w[j];
          });
        }
      } else {
        run(pix, end, p, in);
        pix = end;
      }
    }
  }

 private:
  bool in_band(int64_t row) const { return row >= s_.band_begin && row < s_.band_end; }

  // Whether this share writes pix's grad_rast and grad_db (as interp_backward_pixel, none without grad_rast).
  bool writes(int64_t pix) const { return a_.grad_rast && pix >= s_.own_begin && pix < s_.own_end; }

  void zero_pixel_grads(int64_t pix) const {
    for (int i = 0; i < 4; ++i) {
      a_.grad_rast[pix * 4 + i] = 0.0f;
      if (a_.grad_db) a_.grad_db[pix * 4 + i] = 0.0f;
    }
  }

  // Looks up pixel pix into the ring and prefetches its rows of g in the band, and the attribute rows grad_rast
  // reads if this share writes it. pixels() calls it for up to 2 kAhead pixels in a row, whenever fewer than kAhead
  // are looked up ahead: when rows lie all over a large grad_attr, the misses on the triangles' indices and on the
  // rows then overlap instead of being taken one after another.
  void look_up(int64_t pix) {
    InterpPixel& p = ring_[pix % (2 * kAhead)];
    hits_[pix % (2 * kAhead)] = interp_pixel(a_, pix, p);
    if (!hits_[pix % (2 * kAhead)]) return;
    for (int j = 0; j < 3; ++j)
      for (int64_t c = 0; c < a_.num_attrs; c += 16) {
        if (in_band(p.row[j])) prefetch_for_write(g_ + p.row[j] + c);
        if (writes(pix)) prefetch(a_.attr + p.row[j] + c);
      }
  }

  // Past the last pixel from pix on that shows pix's triangle, in pix's attribute block.
  int64_t run_end(int64_t pix, int64_t e) const {
    const float id = a_.rast[pix * 4 + 3];
    const int64_t image_end = a_.attr_per_image ? (pix / a_.pixels_per_image + 1) * a_.pixels_per_image : e;
    const int64_t last = std::min(e, image_end);
    int64_t end = pix + 1;
    while (end < last && a_.rast[end * 4 + 3] == id) ++end;
    return end;
  }

  void run(int64_t b, int64_t e, const InterpPixel& p, const bool in[3]) {
    const int64_t A = a_.num_attrs, D = a_.num_diff, V = vecs_, T = A % 2;
    const bool adds = in[0] || in[1] || in[2];
    const float *r0 = a_.attr + p.row[0], *r1 = a_.attr + p.row[1], *r2 = a_.attr + p.row[2];
    for (int64_t c = 0; c < A; ++c) d0_[c] = r0[c] - r2[c], d1_[c] = r1[c] - r2[c];
    std::fill(sums_.begin(), sums_.end(), Double2{});
    std::fill(tail_.begin(), tail_.end(), 0.0);
    std::fill(diff_.begin(), diff_.end(), 0.0);
    Double2 *s0 = sums_.data(), *s1 = s0 + V, *s2 = s1 + V;
    double *t0 = tail_.data(), *t1 = t0 + T, *t2 = t1 + T;
    // The run's pixels this share writes grad_rast and grad_db for (grad_rast four pixels at a time).
    int64_t own_b = std::max(b, s_.own_begin), own_e = std::min(e, s_.own_end);
    if (!a_.grad_rast) own_b = own_e;
    for (int64_t pix = adds ? b : own_b; pix < (adds ? e : own_e); ++pix) {
      const float* r = a_.rast + pix * 4;
      const float u = r[0], v = r[1], w = (1.0f - r[0]) - r[1];
      const float* go = a_.grad_out + pix * A;
      for (int64_t c = 0; c < A; c += 16) prefetch(go + 8 * A + c);  // may lie past the end: no fault
      if (adds) {
        for (int64_t m = 0; m < V; ++m) {
          const Float2 x = load<Float2>(go + 2 * m);
          s0[m] += widen(x * u);
          s1[m] += widen(x * v);
          s2[m] += widen(x * w);
        }
        for (int64_t k = 0; k < T; ++k) {
          const float x = go[2 * V + k];
          t0[k] += (double)(x * u), t1[k] += (double)(x * v), t2[k] += (double)(x * w);
        }
      }
      const bool own = pix >= own_b && pix < own_e;
      float gdb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int64_t k = 0; k < D && a_.grad_da; ++k) {
        const int64_t c = a_.diff[k];
        const float* db = a_.rast_db + pix * 4;
        const float gx = a_.grad_da[pix * 2 * D + 2 * k], gy = a_.grad_da[pix * 2 * D + 2 * k + 1];
        const float w0 = gx * db[0] + gy * db[1], w1 = gx * db[2] + gy * db[3];
        if (adds) diff_[3 * k] += (double)w0, diff_[3 * k + 1] += (double)w1, diff_[3 * k + 2] += (double)(-(w0 + w1));
        if (own) gdb[0] += gx * d0_[c], gdb[1] += gy * d0_[c], gdb[2] += gx * d1_[c], gdb[3] += gy * d1_[c];
      }
      if (!own) continue;
      if (a_.grad_db)
        for (int i = 0; i < 4; ++i) a_.grad_db[pix * 4 + i] = gdb[i];
      // Four pixels at a time while their grad_out rows are in L1; the last few one by one.
      const int64_t first = pix - (pix - own_b) % 4;
      if (pix - first == 3) {
        Float4 gu, gv;
        rast_grads_of_four(a_.grad_out + first * A, A, d0_.data(), d1_.data(), gu, gv);
        for (int q = 0; q < 4; ++q) {
          float* gr = a_.grad_rast + (first + q) * 4;
          gr[0] = gu[q], gr[1] = gv[q], gr[2] = 0.0f, gr[3] = 0.0f;
        }
      } else if (own_e - first < 4) {
        float gu = 0.0f, gv = 0.0f;
        for (int64_t c = 0; c < A; ++c) gu += go[c] * d0_[c], gv += go[c] * d1_[c];
        float* gr = a_.grad_rast + pix * 4;
        gr[0] = gu, gr[1] = gv, gr[2] = 0.0f, gr[3] = 0.0f;
      }
    }
    // Row after row: a degenerate triangle may name one row twice.
    for (int j = 0; j < 3; ++j) {
      if (!in[j]) continue;
      Acc* row = g_ + p.row[j];
      const Double2* sv = sums_.data() + j * V;
      for (int64_t c = 0; c < 2 * V; ++c) row[c] += (Acc)sv[c / 2][c % 2];
      for (int64_t k = 0; k < T; ++k) row[2 * V + k] += (Acc)tail_[j * T + k];
      for (int64_t k = 0; k < D; ++k) row[a_.diff[k]] += (Acc)diff_[3 * k + j];
    }
  }

  const InterpArgs& a_;
  InterpArgs attr_only_;  // a_ without grad_rast and grad_db: for pixels another thread owns
  Acc* g_;
  Share s_;
  int64_t vecs_;
  std::vector<Double2> sums_;
  std::vector<double> tail_, diff_;
  std::vector<float> d0_, d1_;
  InterpPixel ring_[2 * kAhead];  // pixel q's at q % (2 kAhead)
  bool hits_[2 * kAhead];
};

// A grad_attr far larger than the pixels' work (many vertices, few pixels), or too large for copies, is split into
// one band of rows per thread instead of a copy per thread: every thread walks all pixels and adds only into its
// own band, so each element gets the same sums in the same order for any thread count. grad_rast and grad_db are
// written by the thread whose share of the pixels they are in.
void scatter_in_bands(const InterpArgs& a, int64_t attr_size, int bands, const ParallelFor& pfor) {
  pfor(bands, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      // Bands end on attribute rows.
      const int64_t rows = attr_size / std::max<int64_t>(a.num_attrs, 1);
      const Share share{a.num_pixels * t / bands, a.num_pixels * (t + 1) / bands, rows * t / bands * a.num_attrs,
                        rows * (t + 1) / bands * a.num_attrs};
      RunScatter<float>(a, a.grad_attr, share).pixels(0, a.num_pixels);
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
  // A pixel's walk costs some 16 elements' worth of summing copies (its triangle's indices miss the cache); when no
  // copy fits, copies would run serially.
  if (!wide && num_chunks > 1 && a.num_pixels >= 4096 &&
      (chunks == 1 || bands_over_copies(attr_size, a.num_pixels, num_chunks)))
    return scatter_in_bands(a, attr_size, num_chunks, pfor);
  chunked_scatter(wide, a.num_pixels, a.grad_attr, attr_size, chunks, pfor,
                  [&](int64_t b, int64_t e, auto* g) { RunScatter(a, g, Share{b, e, 0, attr_size}).pixels(b, e); });
}

}  // namespace prerast

// The entry points of the kernel library (kernel_entry.h).
namespace prerast {

PRERAST_CPU_ENTRY(interpolate_forward_cpu, InterpArgs, a, k) { interpolate_forward_cpu(a, k.pfor); }
PRERAST_CPU_ENTRY(interpolate_backward_cpu, InterpArgs, a, k) {
  interpolate_backward_cpu(a, k.pfor, k.num_threads, kMaxChunkBytes);
}

}  // namespace prerast
