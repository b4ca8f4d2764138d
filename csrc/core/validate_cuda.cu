// Device-side index checks (validate.h): one thread per value, and a device-side assert where one is bad.
#include <cstdio>

#include "cuda_helpers.cuh"
#include "kernel_entry.h"
#include "validate.h"

// A device-side assert that the build's NDEBUG does not compile out (torch's CUDA_KERNEL_ASSERT does the same):
// the kernel stops and the launch's stream reports cudaErrorAssert. CUDA's crt/common_functions.h declares the
// device half of assert() whatever NDEBUG says: __assert_fail beside a GNU host compiler, _wassert (wide strings)
// beside MSVC.
#if defined(_WIN32)
#define PR_WIDEN_(s) L##s
#define PR_WIDEN(s) PR_WIDEN_(s)
#define PR_DEVICE_ASSERT_FAIL(message) _wassert(PR_WIDEN(message), PR_WIDEN(__FILE__), (unsigned)__LINE__)
#else
#define PR_DEVICE_ASSERT_FAIL(message) __assert_fail(message, __FILE__, __LINE__, __func__)
#endif

namespace prerast {
namespace {

__global__ void indices_kernel(const int32_t* tri, int64_t n, int64_t num_vertices) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t v = tri[i];
  if (v < 0 || v >= num_vertices) {
    printf("prerast: tri[%lld][%lld] = %d is not a vertex index: there are %lld vertices\n", (long long)(i / 3),
           (long long)(i % 3), v, (long long)num_vertices);
    PR_DEVICE_ASSERT_FAIL("prerast: tri holds a vertex index outside [0, number of vertices)");
  }
}

__global__ void topology_table_kernel(const int32_t* table, int64_t n, int64_t bound) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t v = table[i];
  if (v < 0 || v >= bound) {
    printf(
        "prerast: topology_hash entry %lld = %d is outside [0, %lld); build it with "
        "antialias_construct_topology_hash(tri)\n",
        (long long)i, v, (long long)bound);
    PR_DEVICE_ASSERT_FAIL("prerast: topology_hash is corrupt");
  }
}

__global__ void triangle_ids_kernel(const float* rast, int64_t num_pixels, int64_t num_triangles) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= num_pixels) return;
  const float id = rast[4 * i + 3];
  // Stored IDs grow with their float bit patterns (encode_triangle_id), so one comparison bounds them.
  const float last =
      encode_triangle_id((int32_t)(num_triangles < kMaxEncodedTriangleId ? num_triangles : kMaxEncodedTriangleId));
  if (!(id >= 0.0f && id <= last)) {  // NaN fails too
    printf(
        "prerast: rast pixel %lld holds triangle ID %f but tri has %lld triangles (IDs 1..%lld, 0 for "
        "background); pass the rast that rasterize returned for this tri\n",
        (long long)i, id, (long long)num_triangles, (long long)num_triangles);
    PR_DEVICE_ASSERT_FAIL("prerast: rast holds a triangle ID outside [0, number of triangles]");
  }
}

}  // namespace

const char* check_indices_cuda(const int32_t* tri, int64_t n, int64_t num_vertices, StreamHandle stream) {
  if (n == 0) return nullptr;
  indices_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(tri, n, num_vertices);
  PR_CUDA_TRY(cudaGetLastError());
  return nullptr;
}

const char* check_topology_table_cuda(const int32_t* table, int64_t n, int64_t bound, StreamHandle stream) {
  if (n == 0) return nullptr;
  topology_table_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(table, n, bound);
  PR_CUDA_TRY(cudaGetLastError());
  return nullptr;
}

const char* check_triangle_ids_cuda(const float* rast, int64_t num_pixels, int64_t num_triangles, StreamHandle stream) {
  if (num_pixels == 0) return nullptr;
  triangle_ids_kernel<<<grid_for(num_pixels, 256), 256, 0, (cudaStream_t)stream>>>(rast, num_pixels, num_triangles);
  PR_CUDA_TRY(cudaGetLastError());
  return nullptr;
}

}  // namespace prerast

// The entry points of the kernel library (kernel_entry.h).
namespace prerast {

PRERAST_CUDA_ENTRY(check_indices_cuda, IndexCheckArgs, a, k) {
  return check_indices_cuda(a.values, a.n, a.bound, k.stream);
}
PRERAST_CUDA_ENTRY(check_topology_table_cuda, IndexCheckArgs, a, k) {
  return check_topology_table_cuda(a.values, a.n, a.bound, k.stream);
}
PRERAST_CUDA_ENTRY(check_triangle_ids_cuda, TriangleIdCheckArgs, a, k) {
  return check_triangle_ids_cuda(a.rast, a.num_pixels, a.num_triangles, k.stream);
}

}  // namespace prerast
