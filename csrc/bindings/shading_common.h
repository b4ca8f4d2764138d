// Helpers shared by the bindings of the ops that shade a rasterized image (interpolate, antialias): checks of
// the rast tensor handed back to them.
#pragma once

#include "../core/validate.h"
#include "common.h"

namespace prerast {

// rast must be float32 [N, H, W, 4] and hold only triangle IDs 0 (background) to T, so that no kernel indexes
// tri with an ID of its own making. The IDs are read here for a CPU tensor only: the op's CUDA path checks them
// on the device first (check_triangle_ids_cuda, core/validate.h), without waiting for the GPU.
inline void check_rast(const char* op, const Tensor& rast, int64_t num_triangles) {
  check_tensor(op, "rast", rast, Dtype::Float, {4});
  check_dim(op, "rast", rast, 3, 4);
  check_image_sides(op, "rast", rast);
  // On the CPU the IDs are read in place; on a GPU the op's CUDA kernels check them without a host sync.
  if (rast.numel() == 0 || !rast.is_cpu()) return;
  const Range<float> r = value_range<float>(rast, 4, 3);
  PR_CHECK_INDEX(!r.nan && r.lo >= 0.0f &&
                     r.hi <= encode_triangle_id((int32_t)std::min<int64_t>(num_triangles, kMaxEncodedTriangleId)),
                 op, ": rast holds triangle IDs in [", r.lo, ", ", r.hi, "]", r.nan ? " and NaN" : "", " but tri has ",
                 num_triangles, " triangles (IDs 1..", num_triangles,
                 ", 0 for background); pass the rast that rasterize returned for this tri");
}

// The CUDA half of check_indices and check_rast, queued on the op's stream ahead of its kernels (call it from
// run_on_device's CUDA function only).
inline const char* check_on_device(const int32_t* tri, int64_t num_triangles, int64_t num_vertices, const float* rast,
                                   int64_t num_pixels, StreamHandle stream) {
  if (const char* err =
          kernels::cuda("check_indices_cuda", IndexCheckArgs{tri, 3 * num_triangles, num_vertices}, stream))
    return err;
  return kernels::cuda("check_triangle_ids_cuda", TriangleIdCheckArgs{rast, num_pixels, num_triangles}, stream);
}

}  // namespace prerast
