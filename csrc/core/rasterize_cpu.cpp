// CPU rasterizer: the same tile-binned design as the CUDA path, in three parallel passes.
//
//  1. Setup and counting: items are split into contiguous chunks. Each chunk sets up its items, keeps those
//     that can draw (compacted in place, in item order) and counts, per tile, how many it overlaps.
//  2. Binning: a prefix sum over (tile, chunk) gives every chunk its slots in every tile's bin, so the chunks
//     fill the bins in parallel and each bin still lists its triangles in item order.
//  3. Shading: threads take tiles one at a time from a shared counter. A tile keeps only the nearest depth
//     key per pixel while its triangles are drawn, then writes each output pixel once.
// The per-pixel decision is frag_eval's (see raster_tile.h), so results do not depend on the path or the
// thread count.
#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <new>
#include <vector>

#include "cpu_simd.h"
#include "host_builtins.h"
#include "host_pages.h"
#include "kernel_entry.h"
#include "raster_tile.h"
#include "raster_tile_avx2.h"
#include "raster_tile_avx512.h"
#include "scatter_cpu.h"

namespace prerast {

namespace {

// Setup chunks: enough for every thread to take several (a few thousand triangles set up on one thread would take
// longer than their shading), but none so small that its tile counters outweigh its triangles.
constexpr int64_t kItemsPerChunk = 8192;
constexpr int64_t kMinItemsPerChunk = 256;
constexpr int64_t kChunksPerThread = 4;
constexpr int64_t kMaxChunks = 64;
constexpr int64_t kSerialShadingWork = int64_t(1) << 17;  // ~ pixels + 64 per (triangle, tile) pair
constexpr int64_t kMaxCounters = int64_t(1) << 22;        // bounds the (chunk, tile) counters to 32 MiB

// Runs fn(i) for i in [0, n), handing indices to the pool's threads one at a time as they become free.
template <class Fn>
void parallel_dynamic(const ParallelFor& pfor, int64_t n, Fn fn) {
  std::atomic<int64_t> next{0};
  pfor(n, 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  });
}

struct Grid {
  int tiles_x = 0, tiles_y = 0;
  int64_t per_image = 0, num_tiles = 0;
  std::vector<float> cx0, cx1, cy0, cy1;  // tile_centres of each tile column and row

  Grid(int W, int H) : tiles_x((W + kTile - 1) / kTile), tiles_y((H + kTile - 1) / kTile) {
    per_image = (int64_t)tiles_x * tiles_y;
    cx0.resize(tiles_x), cx1.resize(tiles_x), cy0.resize(tiles_y), cy1.resize(tiles_y);
    float unused0, unused1;
    for (int tx = 0; tx < tiles_x; ++tx) tile_centres(tx, 0, W, H, cx0[tx], unused0, cx1[tx], unused1);
    for (int ty = 0; ty < tiles_y; ++ty) tile_centres(0, ty, W, H, unused0, cy0[ty], unused1, cy1[ty]);
  }
};

// The tiles of image n that the triangle may cover (conservatively: binning a triangle into a tile it misses
// costs time, never correctness). Counting and filling the bins must agree on them, so the count pass keeps
// them as a bit mask over the triangle's tile span where that span is at most kMaskSpan tiles square.
constexpr int kMaskSpan = 4;

inline bool may_cover_tile(const TriSetup& s, const Grid& g, int tx, int ty) {
  return rect_may_cover(s, g.cx0[tx], g.cy0[ty], g.cx1[tx], g.cy1[ty]);
}

template <class Fn>
uint16_t for_each_tile(const TriSetup& s, int32_t n, const Grid& g, Fn fn) {
  const int tx0 = s.x0 / kTile, ty0 = s.y0 / kTile, tx1 = s.x1 / kTile, ty1 = s.y1 / kTile;
  uint16_t mask = 0;
  const bool small = tx1 - tx0 < kMaskSpan && ty1 - ty0 < kMaskSpan;
  for (int ty = ty0; ty <= ty1; ++ty)
    for (int tx = tx0; tx <= tx1; ++tx)
      if (may_cover_tile(s, g, tx, ty)) {
        fn(n * g.per_image + (int64_t)ty * g.tiles_x + tx);
        if (small) mask |= (uint16_t)(1u << ((ty - ty0) * kMaskSpan + (tx - tx0)));
      }
  return mask;
}

// for_each_tile again, from the mask it returned where the span was small.
template <class Fn>
void for_each_tile_again(const TriSetup& s, int32_t n, const Grid& g, uint16_t mask, Fn fn) {
  const int tx0 = s.x0 / kTile, ty0 = s.y0 / kTile, tx1 = s.x1 / kTile, ty1 = s.y1 / kTile;
  if (tx1 - tx0 >= kMaskSpan || ty1 - ty0 >= kMaskSpan) {
    for_each_tile(s, n, g, fn);
    return;
  }
  for (; mask; mask &= mask - 1) {
    const int bit = lowest_bit(mask);
    fn(n * g.per_image + (int64_t)(ty0 + bit / kMaskSpan) * g.tiles_x + (tx0 + bit % kMaskSpan));
  }
}

// Uninitialised storage kept from call to call: a fresh multi-megabyte allocation per call pays for the
// kernel zeroing its pages, which costs as much as the setup written into them. Large ones are on huge pages:
// the shading pass reads the setups of a tile's triangles from all over them (a soup's neighbours on screen are
// far apart in memory), and with 4 KiB pages most of those reads would also miss the TLB.
template <class T>
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { release(); }

  T* get(int64_t n) {
    if (n > capacity_) {
      release();
      constexpr size_t kHuge = size_t(2) << 20;
      const size_t need = (size_t)n * sizeof(T), align = need >= 2 * kHuge ? kHuge : 64;
      const size_t bytes = (need + align - 1) / align * align;
      data_ = static_cast<T*>(aligned_malloc(align, bytes));
      if (data_ == nullptr) throw std::bad_alloc();
      advise_huge_pages(data_, bytes);
      capacity_ = n;
    }
    return data_;
  }
  int64_t bytes() const { return capacity_ * (int64_t)sizeof(T); }
  void release() {
    aligned_free(data_);
    data_ = nullptr, capacity_ = 0;
  }

 private:
  T* data_ = nullptr;
  int64_t capacity_ = 0;
};

struct ScratchSet {
  Scratch<TriSetup> setups;
  Scratch<int32_t> image, bin_items;
  Scratch<uint16_t> tile_mask;
  Scratch<int64_t> counts;

  // Scratch beyond this is given back after the call rather than kept for the next one.
  static constexpr int64_t kKeptBytes = int64_t(512) << 20;
  void trim() {
    if (setups.bytes() + image.bytes() + tile_mask.bytes() + bin_items.bytes() + counts.bytes() <= kKeptBytes) return;
    setups.release(), image.release(), tile_mask.release(), bin_items.release(), counts.release();
  }
};

struct Frame {
  Frame(const RasterArgs& args, int W, int H) : a(args), grid(W, H) {}
  const RasterArgs& a;
  Grid grid;
  TriSetup* setups = nullptr;      // drawable setups, compacted at the front of each chunk's range
  int32_t* image = nullptr;        // the image of each setup
  uint16_t* tile_mask = nullptr;   // for_each_tile's mask for each setup
  std::vector<int64_t> bin_start;  // [num_tiles + 1]
  int32_t* bin_items = nullptr;
  std::vector<float> px_ndc;  // pixel_center_ndc(x, W), padded to whole tiles
  std::vector<float> py_ndc;  // pixel_center_ndc(y, H): a division per row of every span otherwise
  bool avx2 = false;
  bool avx2_write = false;  // also needs every setup's fields to be addressable by an int32 gather index
  bool avx512 = false;      // whole tile rows at a time (with avx2_write's condition for writing)
};

// One output pixel from the tile's keys: zeros where nothing is drawn, else the winner's values.
void write_pixel(const Frame& f, const TileKeys& t, int k, float px, float py, float* r, float* d) {
  if (t.id[k] == 0) {
    r[0] = r[1] = r[2] = r[3] = 0.0f;
    if (d) d[0] = d[1] = d[2] = d[3] = 0.0f;
    return;
  }
  frag_attrs(f.setups[t.item[k]], px, py, f.a.width, f.a.height, r, d);
  r[2] = t.z[k], r[3] = encode_triangle_id(t.id[k]);
}

void write_tile(const Frame& f, const TileKeys& t, int64_t n, int xa, int ya) {
  const RasterArgs& a = f.a;
  const int W = a.width, H = a.height;
  const int xb = std::min(xa + kTile, W), yb = std::min(ya + kTile, H);
  for (int y = ya; y < yb; ++y) {
    const float py = f.py_ndc[y];
    const int64_t row = ((n * H + y) * W + xa) * 4;
    float* r = a.rast + row;
    float* db = a.rast_db ? a.rast_db + row : nullptr;
#ifdef PRERAST_HAVE_AVX512_PATH
    if (f.avx512 && f.avx2_write && xa + kTile <= xb &&
        write_group_avx512(t, (y - ya) * kTile, f.setups, f.px_ndc.data(), xa, py, 2.0f / (float)W, 2.0f / (float)H, r,
                           db))
      continue;
#endif
    for (int x = xa; x < xb; x += 8) {
      const int k = (y - ya) * kTile + (x - xa), o = (x - xa) * 4;
#ifdef PRERAST_HAVE_AVX2_PATH
      if (f.avx2_write && x + 8 <= xb &&
          write_group_avx2(t, k, f.setups, f.px_ndc.data(), x, py, 2.0f / (float)W, 2.0f / (float)H, r + o,
                           db ? db + o : nullptr))
        continue;
#endif
      for (int j = 0; j < std::min(8, xb - x); ++j)
        write_pixel(f, t, k + j, f.px_ndc[x + j], py, r + o + 4 * j, db ? db + o + 4 * j : nullptr);
    }
  }
}

void shade_tile(const Frame& f, int64_t tile) {
  const RasterArgs& a = f.a;
  const int W = a.width, H = a.height;
  const int64_t n = tile / f.grid.per_image;
  const int ty = (int)((tile % f.grid.per_image) / f.grid.tiles_x), tx = (int)(tile % f.grid.tiles_x);
  const int xa = tx * kTile, ya = ty * kTile;
  const float* prev = a.peel_prev ? a.peel_prev + n * H * W * 4 : nullptr;
  TileKeys t;
  t.clear();
  const int64_t end = f.bin_start[tile + 1];
  for (int64_t e = f.bin_start[tile]; e < end; ++e) {
    // A bin's setups are scattered over memory when its triangles are (a soup): fetch ahead.
    constexpr int64_t kAhead = 6;
    if (e + kAhead < end) {
      const char* next = (const char*)(f.setups + f.bin_items[e + kAhead]);
      for (size_t line = 0; line < sizeof(TriSetup); line += 64) prefetch(next + line);
    }
    const int32_t k = f.bin_items[e];
    const TriSetup& s = f.setups[k];
    TileSpan sp;
    if (!tile_span(s, xa, ya, W, H, sp)) continue;
#ifdef PRERAST_HAVE_AVX512_PATH
    if (f.avx512 && !prev) {
      draw_span_avx512(s, k, sp, f.px_ndc.data(), f.py_ndc.data(), t);
      continue;
    }
#endif
#ifdef PRERAST_HAVE_AVX2_PATH
    if (f.avx2 && !prev) {
      draw_span_avx2(s, k, sp, f.px_ndc.data(), f.py_ndc.data(), t);
      continue;
    }
#endif
    draw_span_scalar(s, k, sp, f.px_ndc.data(), W, H, prev, t);
  }
  write_tile(f, t, n, xa, ya);
}

// Shades tiles [b, e), then orders this thread's streamed output stores before it returns to the pool. One fence
// per run of tiles rather than per tile: a fence (like the pool's atomic counter) waits for every streamed line
// still in flight to reach memory, which for a 16x16 tile is most of the time it took to shade.
void shade_tiles(const Frame& f, int64_t b, int64_t e) {
  for (int64_t tile = b; tile < e; ++tile) shade_tile(f, tile);
#ifdef PRERAST_HAVE_AVX2_PATH
  if (f.avx2_write) finish_output_stores();
#endif
}

}  // namespace

void rasterize_forward_cpu(const RasterArgs& a, const ParallelFor& pfor, int num_threads) {
  const int W = a.width, H = a.height;
  ItemMap m;
  m.num_images = (int32_t)a.num_images;
  m.num_triangles = a.num_triangles;
  std::vector<int64_t> item_start;
  std::vector<int32_t> first;
  if (a.ranges) {
    item_start.resize(a.num_images + 1);
    first.resize(a.num_images);
    m.num_items = build_range_items(a.ranges, a.num_images, item_start.data(), first.data());
    m.item_start = item_start.data();
    m.first = first.data();
  } else {
    m.num_items = a.num_images * a.num_triangles;
  }

  Frame f(a, W, H);
  Grid& g = f.grid;
  g.num_tiles = a.num_images * g.per_image;
  f.px_ndc.resize((size_t)g.tiles_x * kTile);
  for (int x = 0; x < (int)f.px_ndc.size(); ++x) f.px_ndc[x] = pixel_center_ndc(x, W);
  f.py_ndc.resize((size_t)H);
  for (int y = 0; y < H; ++y) f.py_ndc[y] = pixel_center_ndc(y, H);
  const CpuSimd simd = cpu_simd_path();  // PRERAST_CPU_SIMD (cpu_simd.h)
  (void)simd;
#ifdef PRERAST_HAVE_AVX2_PATH
  f.avx2 = simd >= CpuSimd::kAvx2;
  f.avx512 = simd == CpuSimd::kAvx512;
  f.avx2_write = f.avx2 && m.num_items < INT32_MAX / (int64_t)(sizeof(TriSetup) / sizeof(float));
#endif

  // 1. Setup and per-chunk tile counts.
  const int64_t items = m.num_items;
  const int64_t wanted =
      std::max<int64_t>(kChunksPerThread * num_threads, (items + kItemsPerChunk - 1) / kItemsPerChunk);
  const int64_t chunks = std::max<int64_t>(
      1,
      std::min({kMaxChunks, wanted, (items + kMinItemsPerChunk - 1) / kMinItemsPerChunk, kMaxCounters / g.num_tiles}));
  auto chunk_begin = [&](int64_t c) { return items * c / chunks; };
  thread_local ScratchSet scratch;  // per calling thread, so that concurrent calls do not share it
  f.setups = scratch.setups.get(std::max<int64_t>(items, 1));
  f.image = scratch.image.get(std::max<int64_t>(items, 1));
  f.tile_mask = scratch.tile_mask.get(std::max<int64_t>(items, 1));
  std::vector<int64_t> chunk_end(chunks);
  int64_t* counts = scratch.counts.get(chunks * g.num_tiles);  // later: each (chunk, tile)'s next slot
  parallel_dynamic(pfor, chunks, [&](int64_t c) {
    int64_t* count = counts + c * g.num_tiles;
    std::fill(count, count + g.num_tiles, 0);
    int64_t k = chunk_begin(c);
    for (int64_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i) {
      int32_t n;
      if (!item_setup(a, m, i, n, f.setups[k])) continue;
      f.image[k] = n;
      f.tile_mask[k] = for_each_tile(f.setups[k], n, g, [&](int64_t t) { ++count[t]; });
      ++k;
    }
    chunk_end[c] = k;
  });

  // 2. Bins: tile-major, chunk order within a tile, item order within a chunk. The counters are walked one
  // chunk at a time (sequential memory), first to size the bins, then to turn counts into slots.
  f.bin_start.assign(g.num_tiles + 1, 0);
  int64_t* total = f.bin_start.data() + 1;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t* count = counts + c * g.num_tiles;
    for (int64_t t = 0; t < g.num_tiles; ++t) total[t] += count[t];
  }
  for (int64_t t = 0; t < g.num_tiles; ++t) f.bin_start[t + 1] += f.bin_start[t];
  const int64_t acc = f.bin_start[g.num_tiles];
  std::vector<int64_t> next(f.bin_start.begin(), f.bin_start.end() - 1);
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t* slot = counts + c * g.num_tiles;
    for (int64_t t = 0; t < g.num_tiles; ++t) {
      const int64_t count = slot[t];
      slot[t] = next[t];
      next[t] += count;
    }
  }
  f.bin_items = scratch.bin_items.get(std::max<int64_t>(acc, 1));
  parallel_dynamic(pfor, chunks, [&](int64_t c) {
    int64_t* slot = counts + c * g.num_tiles;
    for (int64_t k = chunk_begin(c); k < chunk_end[c]; ++k)
      for_each_tile_again(f.setups[k], f.image[k], g, f.tile_mask[k],
                          [&](int64_t t) { f.bin_items[slot[t]++] = (int32_t)k; });
  });

  // 3. Shading. Outputs are faulted in as tiles are written; at 4096^2 those faults cost more than the shading.
  const size_t out_bytes = (size_t)a.num_images * H * W * 4 * sizeof(float);
  advise_huge_pages(a.rast, out_bytes);
  if (a.rast_db) advise_huge_pages(a.rast_db, out_bytes);
  // Waking the pool costs more than a small frame's whole shading when the machine is busy: shade those here.
  const int64_t work = a.num_images * H * W + acc * 64;
  if (work < kSerialShadingWork) {
    shade_tiles(f, 0, g.num_tiles);
  } else {
    // Threads take runs of a few tiles (of one tile row: neighbours in the output) from a shared counter.
    constexpr int64_t kTilesPerTake = 4;
    const int64_t takes = (g.num_tiles + kTilesPerTake - 1) / kTilesPerTake;
    std::atomic<int64_t> next{0};
    pfor(takes, 1, [&](int64_t, int64_t) {
      for (int64_t i = next.fetch_add(1); i < takes; i = next.fetch_add(1)) {
        const int64_t b = i * kTilesPerTake, e = std::min(b + kTilesPerTake, g.num_tiles);
        for (int64_t tile = b; tile < e; ++tile) shade_tile(f, tile);
      }
#ifdef PRERAST_HAVE_AVX2_PATH
      if (f.avx2_write) finish_output_stores();
#endif
    });
  }
  scratch.trim();
}

namespace {

// The backward over pixels [b, e): consecutive pixels mostly belong to the same triangle, and a pixel's gradient
// is linear in its G (frag_grad_terms, frag_grad_rows), so a run of them sums G in double and applies K once
// (frag_grad_apply) instead of per pixel. Pixels whose weights need double go through frag_grad_pixel one by one, as on
// the GPU.
template <class Acc>
class TriangleRun {
 public:
  TriangleRun(const RasterGradArgs& a, Acc* grad) : a_(a), grad_(grad) {}
  ~TriangleRun() { flush(); }

  void pixel(int64_t n, int x, int y, const float* g, const float* gdb, int32_t id) {
    const int64_t key = (a_.instanced ? n : 0) * a_.num_triangles + (id - 1);
    if (key != key_) {
      flush();
      key_ = key;
      base_ = a_.instanced ? n * a_.num_vertices : 0;
      idx_ = a_.tri + (int64_t)(id - 1) * 3;
      frag_grad_tri(a_.pos + (base_ + idx_[0]) * 4, a_.pos + (base_ + idx_[1]) * 4, a_.pos + (base_ + idx_[2]) * 4, t_);
    }
    const float px = pixel_center_ndc(x, a_.width), py = pixel_center_ndc(y, a_.height);
    const float dx = px - t_.ox, dy = py - t_.oy;  // about the triangle's point o, as frag_grad_pixel
    float gl[3], gx[3], gy[3], G[3][3];
    const float S =
        frag_grad_terms<float>(t_.K, t_.Kw, t_.bw, dx, dy, a_.width, a_.height, g[0], g[1], gdb, gl, gx, gy, false);
    frag_grad_rows<float>(gl, gx, gy, dx, dy, G);
    // One test for all nine: any inf or NaN among them makes the sum non-finite (a sum that merely overflows sends
    // the pixel to the double path too, which is only slower).
    const float all = ((G[0][0] + G[0][1] + G[0][2]) + (G[1][0] + G[1][1] + G[1][2])) + (G[2][0] + G[2][1] + G[2][2]);
    if (t_.float_ok && S >= kMinWeightedSum && isfinite(all)) {
      for (int i = 0; i < 3; ++i)
        for (int c = 0; c < 3; ++c) sum_[i][c] += G[i][c];
      any_ = true;
      return;
    }
    float out[3][4];
    frag_grad_pixel(t_, px, py, a_.width, a_.height, g[0], g[1], gdb, out);
    for (int j = 0; j < 3; ++j) add(j, out[j][0], out[j][1], out[j][3]);
  }

 private:
  void add(int j, double gx, double gy, double gw) {
    Acc* o = grad_ + (base_ + idx_[j]) * 4;
    o[0] += (Acc)gx, o[1] += (Acc)gy, o[3] += (Acc)gw;
  }

  void flush() {
    if (!any_) return;
    double K[3][3], Kw[3][3], out[3][4];
    for (int i = 0; i < 3; ++i)
      for (int c = 0; c < 3; ++c) K[i][c] = t_.K[i][c], Kw[i][c] = t_.Kw[i][c];
    frag_grad_apply<double>(K, Kw, sum_, out);
    untranslate_grad<double>(out, t_.ox, t_.oy);
    for (int j = 0; j < 3; ++j) add(j, out[j][0] * t_.scale[j], out[j][1] * t_.scale[j], out[j][3] * t_.scale[j]);
    for (auto& row : sum_) row[0] = row[1] = row[2] = 0.0;
    any_ = false;
  }

  const RasterGradArgs& a_;
  Acc* grad_;
  int64_t key_ = -1, base_ = 0;
  const int32_t* idx_ = nullptr;
  GradTri t_;
  double sum_[3][3] = {};
  bool any_ = false;
};

template <class Acc>
void backward_pixels(const RasterGradArgs& a, int64_t b, int64_t e, Acc* grad) {
  TriangleRun<Acc> run(a, grad);
  const int64_t hw = (int64_t)a.height * a.width;
  int64_t n = b / hw;
  int y = (int)(b % hw / a.width), x = (int)(b % a.width);
  for (int64_t p = b; p < e; ++p) {
    int32_t id;
    const float *g, *gdb;
    if (pixel_grad_inputs(a, p, id, g, gdb)) run.pixel(n, x, y, g, gdb, id);
    if (++x == a.width) {
      x = 0;
      if (++y == a.height) y = 0, ++n;
    }
  }
}

}  // namespace

void rasterize_backward_cpu(const RasterGradArgs& a, const ParallelFor& pfor, int num_chunks) {
  // Deterministic: chunks of pixels accumulate into their own copies, summed in a fixed order.
  const int64_t pixels = a.num_images * a.height * a.width;
  const int64_t pos_size = (a.instanced ? a.num_images : 1) * a.num_vertices * 4;
  const bool wide = wide_scatter(pixels * 4, pos_size, num_chunks, kKeptScatterBytes);
  chunked_scatter(wide, pixels, a.grad_pos, pos_size, num_chunks, pfor,
                  [&](int64_t b, int64_t e, auto* g) { backward_pixels(a, b, e, g); });
}

}  // namespace prerast

// The entry points of the kernel library (kernel_entry.h).
namespace prerast {

PRERAST_CPU_ENTRY(rasterize_forward_cpu, RasterArgs, a, k) { rasterize_forward_cpu(a, k.pfor, k.num_threads); }
PRERAST_CPU_ENTRY(rasterize_backward_cpu, RasterGradArgs, a, k) { rasterize_backward_cpu(a, k.pfor, k.num_threads); }

}  // namespace prerast
