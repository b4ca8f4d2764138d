// Helpers shared by the bindings of the ops that shade a rasterized image (interpolate, antialias): checks of
// the rast tensor handed back to them.
#pragma once

#include "common.h"

namespace prerast {

// rast must be float32 [N, H, W, 4] and hold only triangle IDs 0 (background) to T, so that no kernel indexes
// tri with an ID of its own making.
inline void check_rast(const char* op, const at::Tensor& rast, int64_t num_triangles) {
  check_tensor(op, "rast", rast, at::kFloat, {4});
  check_dim(op, "rast", rast, 3, 4);
  if (rast.numel() == 0) return;
  auto mm = at::aminmax(rast.select(3, 3));
  const float lo = std::get<0>(mm).item<float>(), hi = std::get<1>(mm).item<float>();
  TORCH_CHECK_INDEX(lo >= 0.0f && hi <= (float)num_triangles, op, ": rast holds triangle IDs in [", lo, ", ", hi,
                    "] but tri has ", num_triangles, " triangles (IDs 1..", num_triangles,
                    ", 0 for background); pass the rast that rasterize returned for this tri");
}

}  // namespace prerast
