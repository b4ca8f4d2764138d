// Checks of index data on the GPU, for the bindings' CUDA paths: reading a CUDA tensor back to check it on the
// host would stall the stream (and make the op impossible to capture in a CUDA graph). A failed check prints what
// was wrong and raises a device-side assert, as torch's own indexing does: kernels queued after it never run, and
// the error reaches Python at the next call that synchronizes with the GPU.
#pragma once

#include <cstdint>

#include "common.h"

namespace prerast {

// The kernel library's argument structs of these checks: n values that must lie in [0, bound), and the triangle
// IDs of a rast.
struct IndexCheckArgs {
  const int32_t* values;
  int64_t n, bound;
};
struct TriangleIdCheckArgs {
  const float* rast;
  int64_t num_pixels, num_triangles;
};

// Every value of tri[0..n) lies in [0, num_vertices).
const char* check_indices_cuda(const int32_t* tri, int64_t n, int64_t num_vertices, StreamHandle stream);

// Every value of an antialias topology table (half_edges, group_of or group_start, n entries) lies in [0, bound).
const char* check_topology_table_cuda(const int32_t* table, int64_t n, int64_t bound, StreamHandle stream);

// The triangle ID channel (3 of 4) of each of the num_pixels pixels of rast lies in [0, num_triangles], not NaN.
const char* check_triangle_ids_cuda(const float* rast, int64_t num_pixels, int64_t num_triangles, StreamHandle stream);

}  // namespace prerast
