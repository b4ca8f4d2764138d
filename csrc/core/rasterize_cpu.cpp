// CPU rasterizer: the same tile-binned design as the CUDA path. Triangles are set up in parallel, binned into
// kTile x kTile tiles in item order, and tiles are shaded in parallel, each keeping the nearest (z/w, id).
#include <algorithm>
#include <vector>

#include "rasterize.h"

namespace prerast {

namespace {

struct Bins {
  int tiles_x = 0, tiles_y = 0;
  std::vector<int64_t> start;  // [num_tiles + 1]
  std::vector<int32_t> items;  // item indices, grouped by tile, in item order
};

template <class Fn>
void for_each_tile(const TriSetup& s, int32_t n, const Bins& b, int W, int H, Fn fn) {
  if (s.x0 > s.x1 || s.y0 > s.y1) return;
  for (int ty = s.y0 / kTile; ty <= s.y1 / kTile; ++ty)
    for (int tx = s.x0 / kTile; tx <= s.x1 / kTile; ++tx) {
      float cx0, cy0, cx1, cy1;
      tile_centres(tx, ty, W, H, cx0, cy0, cx1, cy1);
      if (rect_may_cover(s, cx0, cy0, cx1, cy1)) fn(((int64_t)n * b.tiles_y + ty) * b.tiles_x + tx);
    }
}

void shade_tile(const RasterArgs& a, const Bins& b, const std::vector<TriSetup>& setups, int64_t tile) {
  const int W = a.width, H = a.height;
  const int64_t per_image = (int64_t)b.tiles_x * b.tiles_y;
  const int64_t n = tile / per_image;
  const int ty = (int)((tile % per_image) / b.tiles_x), tx = (int)(tile % b.tiles_x);
  const int xa = tx * kTile, ya = ty * kTile;
  const int xb = std::min(xa + kTile, W), yb = std::min(ya + kTile, H);
  float bz[kTile * kTile], bu[kTile * kTile], bv[kTile * kTile];
  int32_t bid[kTile * kTile], bitem[kTile * kTile];
  std::fill(bid, bid + kTile * kTile, 0);
  for (int64_t e = b.start[tile]; e < b.start[tile + 1]; ++e) {
    const int32_t item = b.items[e];
    const TriSetup& s = setups[item];
    const int32_t id1 = s.tri + 1;
    for (int y = std::max(ya, s.y0); y < std::min(yb, s.y1 + 1); ++y) {
      const float py = pixel_center_ndc(y, H);
      for (int x = std::max(xa, s.x0); x < std::min(xb, s.x1 + 1); ++x) {
        float u, v, zw;
        if (!frag_eval(s, pixel_center_ndc(x, W), py, u, v, zw)) continue;
        const int k = (y - ya) * kTile + (x - xa);
        if (a.peel_prev && !behind_prev(a.peel_prev + ((n * H + y) * W + x) * 4, zw, id1)) continue;
        if (bid[k] != 0 && !key_less(zw, id1, bz[k], bid[k])) continue;
        bz[k] = zw, bu[k] = u, bv[k] = v, bid[k] = id1, bitem[k] = item;
      }
    }
  }
  for (int y = ya; y < yb; ++y)
    for (int x = xa; x < xb; ++x) {
      const int k = (y - ya) * kTile + (x - xa);
      const int64_t o = ((n * H + y) * W + x) * 4;
      float* r = a.rast + o;
      if (bid[k] == 0) {
        r[0] = r[1] = r[2] = r[3] = 0.0f;
        if (a.rast_db) std::fill(a.rast_db + o, a.rast_db + o + 4, 0.0f);
        continue;
      }
      r[0] = bu[k], r[1] = bv[k], r[2] = bz[k], r[3] = encode_triangle_id(bid[k]);
      if (a.rast_db) frag_db(setups[bitem[k]], pixel_center_ndc(x, W), pixel_center_ndc(y, H), W, H, a.rast_db + o);
    }
}

}  // namespace

void rasterize_forward_cpu(const RasterArgs& a, const ParallelFor& pfor) {
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

  std::vector<TriSetup> setups(m.num_items);
  std::vector<int32_t> image(m.num_items);
  pfor(m.num_items, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) item_setup(a, m, i, image[i], setups[i]);
  });

  Bins bins;
  bins.tiles_x = (W + kTile - 1) / kTile;
  bins.tiles_y = (H + kTile - 1) / kTile;
  const int64_t num_tiles = a.num_images * bins.tiles_x * bins.tiles_y;
  bins.start.assign(num_tiles + 1, 0);
  for (int64_t i = 0; i < m.num_items; ++i)
    for_each_tile(setups[i], image[i], bins, W, H, [&](int64_t t) { ++bins.start[t + 1]; });
  for (int64_t t = 0; t < num_tiles; ++t) bins.start[t + 1] += bins.start[t];
  bins.items.resize(bins.start[num_tiles]);
  std::vector<int64_t> cursor(bins.start.begin(), bins.start.end() - 1);
  for (int64_t i = 0; i < m.num_items; ++i)
    for_each_tile(setups[i], image[i], bins, W, H, [&](int64_t t) { bins.items[cursor[t]++] = (int32_t)i; });

  pfor(num_tiles, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) shade_tile(a, bins, setups, t);
  });
}

void rasterize_backward_cpu(const RasterGradArgs& a, const ParallelFor& pfor, int num_chunks) {
  // Each chunk of pixels accumulates into its own buffer; buffers are summed in a fixed order, so the result
  // does not depend on thread scheduling.
  const int64_t pixels = a.num_images * a.height * a.width;
  const int64_t pos_size = (a.instanced ? a.num_images : 1) * a.num_vertices * 4;
  num_chunks = (int)std::max<int64_t>(1, std::min<int64_t>(num_chunks, pixels / 4096 + 1));
  std::vector<float> extra((size_t)(num_chunks - 1) * pos_size, 0.0f);
  pfor(num_chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      float* g = c == 0 ? a.grad_pos : extra.data() + (c - 1) * pos_size;
      const int64_t p0 = pixels * c / num_chunks, p1 = pixels * (c + 1) / num_chunks;
      for (int64_t p = p0; p < p1; ++p) pixel_backward(a, p, [g](int64_t i, float v) { g[i] += v; });
    }
  });
  for (int c = 1; c < num_chunks; ++c) {
    const float* src = extra.data() + (c - 1) * pos_size;
    for (int64_t i = 0; i < pos_size; ++i) a.grad_pos[i] += src[i];
  }
}

}  // namespace prerast
