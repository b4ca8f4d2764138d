// Helpers shared by the bindings of the ops that shade a rasterized image (interpolate, antialias): checks of
// the rast tensor handed back to them.
#pragma once

#include "common.h"

namespace prerast {

// rast must be float32 [N, H, W, 4] and hold only triangle IDs 0 (background) to T, so that no kernel indexes
// tri with an ID of its own making.
inline void check_rast(const char* op, const Tensor& rast, int64_t num_triangles) {
  check_tensor(op, "rast", rast, Dtype::Float, {4});
  check_dim(op, "rast", rast, 3, 4);
  if (rast.numel() == 0) return;
  // On the CPU the IDs are read in place; from a GPU only the ID channel is copied.
  const Range<float> r = rast.is_cpu() ? value_range<float>(rast, 4, 3)
                                       : value_range<float>(facade::select(rast, 3, 3));
  PR_CHECK_INDEX(!r.nan && r.lo >= 0.0f && r.hi <= encode_triangle_id((int32_t)std::min<int64_t>(num_triangles, kMaxEncodedTriangleId)), op, ": rast holds triangle IDs in [",
                 r.lo, ", ", r.hi, "]", r.nan ? " and NaN" : "", " but tri has ", num_triangles,
                 " triangles (IDs 1..", num_triangles, ", 0 for background); pass the rast that rasterize returned for this tri");
}

}  // namespace prerast
