// Per-tile state of the CPU rasterizer and the scalar shading of one (triangle, tile) pair.
//
// A tile keeps, per pixel, the nearest depth key (z/w, id) and the index of the setup that produced it. Only
// keys are kept while triangles are drawn: barycentrics and their derivatives are computed once per pixel,
// for the winner, when the tile is written out (frag_attrs, as on the GPU).
#pragma once

#include <algorithm>
#include <cstring>

#include "rasterize.h"

namespace prerast {

struct TileKeys {
  alignas(64) float z[kTile * kTile];
  alignas(64) int32_t id[kTile * kTile];    // tri + 1, 0 where nothing is drawn yet
  alignas(64) int32_t item[kTile * kTile];  // index of the winner's setup
  void clear() { std::memset(id, 0, sizeof(id)); }
};

// Where a (triangle, tile) pair draws: the tile's rectangle clipped to the triangle's pixel bounding box.
struct TileSpan {
  int xa, ya;          // the tile's first pixel
  int x0, x1, y0, y1;  // inclusive, inside the tile
};

inline bool tile_span(const TriSetup& s, int xa, int ya, int W, int H, TileSpan& sp) {
  sp.xa = xa, sp.ya = ya;
  sp.x0 = std::max(xa, s.x0), sp.x1 = std::min(std::min(xa + kTile, W) - 1, s.x1);
  sp.y0 = std::max(ya, s.y0), sp.y1 = std::min(std::min(ya + kTile, H) - 1, s.y1);
  return sp.x0 <= sp.x1 && sp.y0 <= sp.y1;
}

// Draws pixel (x, y) of the span with frag_eval and the depth rule: the reference per-pixel decision.
inline void draw_pixel(const TriSetup& s, int32_t setup_index, const TileSpan& sp, int x, int y, float px, float py,
                       const float* prev, TileKeys& t) {
  float zw;
  if (!frag_eval(s, px, py, zw)) return;
  const int32_t id1 = s.tri + 1;
  if (prev && !behind_prev(prev, zw, id1)) return;
  const int k = (y - sp.ya) * kTile + (x - sp.xa);
  if (t.id[k] != 0 && !key_less(zw, id1, t.z[k], t.id[k])) return;
  t.z[k] = zw, t.id[k] = id1, t.item[k] = setup_index;
}

// prev_image: the previous depth layer of this image ([H, W, 4]) when peeling, else null.
inline void draw_span_scalar(const TriSetup& s, int32_t setup_index, const TileSpan& sp, const float* px_ndc, int W,
                             int H, const float* prev_image, TileKeys& t) {
  for (int y = sp.y0; y <= sp.y1; ++y) {
    const float py = pixel_center_ndc(y, H);
    for (int x = sp.x0; x <= sp.x1; ++x)
      draw_pixel(s, setup_index, sp, x, y, px_ndc[x], py, prev_image ? prev_image + ((int64_t)y * W + x) * 4 : nullptr,
                 t);
  }
}

}  // namespace prerast
