// CUDA interpolation. The forward runs one thread per output element (pixel, attribute), so that reads of the
// attribute rows and writes of the output are coalesced. The backward runs one thread per pixel and scatters
// into grad_attr with atomics; where a whole warp shows one triangle (large triangles: the common case at high
// resolution) the warp first sums its contributions, so each row gets one atomic per warp instead of 32.
#include "cuda_helpers.cuh"
#include "interpolate.h"
#include "kernel_entry.h"

namespace prerast {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__global__ void forward_kernel(InterpArgs a, int64_t total) {
  const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (e >= total) return;
  const int64_t pix = e / a.num_attrs, c = e % a.num_attrs;
  InterpPixel p;
  a.out[e] = interp_pixel(a, pix, p) ? interp_value(a, p, c) : 0.0f;
}

__global__ void deriv_kernel(InterpArgs a, int64_t total) {
  const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (e >= total) return;
  const int64_t pix = e / a.num_diff, k = e % a.num_diff;
  InterpPixel p;
  float dx = 0.0f, dy = 0.0f;
  if (interp_pixel(a, pix, p)) interp_deriv(a, p, a.rast_db + pix * 4, k, dx, dy);
  a.out_da[2 * e] = dx;
  a.out_da[2 * e + 1] = dy;
}

// Block size must be a multiple of 32 and every lane must reach the shuffles: no early return.
__global__ void backward_kernel(InterpArgs a, WideSum sum) {
  const int64_t pix = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const bool in = pix < a.num_pixels;
  InterpPixel p{};
  const bool hit = in && interp_pixel(a, pix, p);
  const int lane = threadIdx.x & 31;
  const unsigned hits = __ballot_sync(kFullMask, hit);
  const int leader = hits ? __ffs(hits) - 1 : 0;
  const int64_t leader_key = __shfl_sync(kFullMask, hit ? p.key : -1, leader);
  const bool uniform = hits != 0 && __all_sync(kFullMask, !hit || p.key == leader_key);
  interp_backward_pixel(a, in ? pix : -1, hit, p, [&](int64_t c, const float* w) {
    if (uniform) {
      float s[3] = {w[0], w[1], w[2]};
      for (int off = 16; off > 0; off >>= 1)
        for (int j = 0; j < 3; ++j) s[j] += __shfl_xor_sync(kFullMask, s[j], off);
      if (lane == leader)
        for (int j = 0; j < 3; ++j) sum.add(p.row[j] + c, s[j]);
    } else if (hit) {
      for (int j = 0; j < 3; ++j) sum.add(p.row[j] + c, w[j]);
    }
  });
}

}  // namespace

const char* interpolate_forward_cuda(const InterpArgs& a, StreamHandle stream_handle) {
  cudaStream_t stream = (cudaStream_t)stream_handle;
  const int64_t values = a.num_pixels * a.num_attrs, derivs = a.out_da ? a.num_pixels * a.num_diff : 0;
  if (values > 0) {
    forward_kernel<<<grid_for(values, 256), 256, 0, stream>>>(a, values);
    PR_CUDA_TRY(cudaGetLastError());
  }
  if (derivs > 0) {
    deriv_kernel<<<grid_for(derivs, 256), 256, 0, stream>>>(a, derivs);
    PR_CUDA_TRY(cudaGetLastError());
  }
  return nullptr;
}

const char* interpolate_backward_cuda(const InterpArgs& a, StreamHandle stream_handle, const Workspace& ws) {
  cudaStream_t stream = (cudaStream_t)stream_handle;
  if (a.num_pixels == 0) return nullptr;
  const int64_t blocks = a.attr_per_image ? a.num_pixels / (a.pixels_per_image > 0 ? a.pixels_per_image : 1) : 1;
  WideSum sum;
  PR_CUDA_TRY_MSG(
      wide_sum_begin(sum, a.grad_attr, blocks * a.num_vertices * a.num_attrs, a.num_pixels * a.num_attrs, ws, stream));
  backward_kernel<<<grid_for(a.num_pixels, 256), 256, 0, stream>>>(a, sum);
  PR_CUDA_TRY(cudaGetLastError());
  return wide_sum_finish(sum, stream);
}

}  // namespace prerast

// The entry points of the kernel library (kernel_entry.h).
namespace prerast {

PRERAST_CUDA_ENTRY(interpolate_forward_cuda, InterpArgs, a, k) { return interpolate_forward_cuda(a, k.stream); }
PRERAST_CUDA_ENTRY(interpolate_backward_cuda, InterpArgs, a, k) {
  return interpolate_backward_cuda(a, k.stream, k.workspace);
}

}  // namespace prerast
