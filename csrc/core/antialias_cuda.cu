// CUDA antialiasing: one thread per pixel finds the crossings of its two pairs; the blend and the color
// gradient run one thread per (pixel, channel) so that color reads and writes are coalesced; the pos gradient
// runs one thread per pixel and scatters with atomics (the only order-dependent sum).
#include "antialias.h"
#include "cuda_helpers.cuh"
#include "kernel_entry.h"

namespace prerast {

namespace {

__global__ void crossing_kernel(AntialiasArgs a, int64_t pixels) {
  const int64_t pix = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (pix >= pixels) return;
  *reinterpret_cast<float2*>(a.crossing + 2 * pix) = make_float2(pair_tau(a, pix, 0), pair_tau(a, pix, 1));
}

__global__ void blend_kernel(AntialiasArgs a, int64_t total) {
  const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (e >= total) return;
  const int64_t pix = e / a.channels, c = e % a.channels;
  antialias_values<1>(a, pix, c, a.out + pix * a.channels);
}

__global__ void color_grad_kernel(AntialiasArgs a, int64_t total) {
  const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (e >= total) return;
  const int64_t pix = e / a.channels, c = e % a.channels;
  antialias_color_grads<1>(a, pix, c, a.grad_color + pix * a.channels);
}

__global__ void pos_grad_kernel(AntialiasArgs a, int64_t pixels, WideSum sum) {
  const int64_t pix = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (pix >= pixels) return;
  for (int dir = 0; dir < 2; ++dir) antialias_pos_backward(a, pix, dir, [&sum](int64_t i, float v) { sum.add(i, v); });
}

}  // namespace

const char* antialias_forward_cuda(const AntialiasArgs& a, StreamHandle stream_handle) {
  cudaStream_t stream = (cudaStream_t)stream_handle;
  const int64_t pixels = a.num_images * a.height * a.width, total = pixels * a.channels;
  if (pixels == 0) return nullptr;
  crossing_kernel<<<grid_for(pixels, 256), 256, 0, stream>>>(a, pixels);
  PR_CUDA_TRY(cudaGetLastError());
  if (total > 0) {
    blend_kernel<<<grid_for(total, 256), 256, 0, stream>>>(a, total);
    PR_CUDA_TRY(cudaGetLastError());
  }
  return nullptr;
}

const char* antialias_backward_cuda(const AntialiasArgs& a, StreamHandle stream_handle, const Workspace& ws) {
  cudaStream_t stream = (cudaStream_t)stream_handle;
  const int64_t pixels = a.num_images * a.height * a.width, total = pixels * a.channels;
  if (total > 0) {
    color_grad_kernel<<<grid_for(total, 256), 256, 0, stream>>>(a, total);
    PR_CUDA_TRY(cudaGetLastError());
  }
  if (a.grad_pos && pixels > 0) {
    WideSum sum;
    const int64_t size = (a.instanced ? a.num_images : 1) * a.num_vertices * 4;
    PR_CUDA_TRY_MSG(wide_sum_begin(sum, a.grad_pos, size, pixels * 4, ws, stream));
    pos_grad_kernel<<<grid_for(pixels, 256), 256, 0, stream>>>(a, pixels, sum);
    PR_CUDA_TRY(cudaGetLastError());
    return wide_sum_finish(sum, stream);
  }
  return nullptr;
}

}  // namespace prerast

// The entry points of the kernel library (kernel_entry.h).
namespace prerast {

PRERAST_CUDA_ENTRY(antialias_forward_cuda, AntialiasArgs, a, k) { return antialias_forward_cuda(a, k.stream); }
PRERAST_CUDA_ENTRY(antialias_backward_cuda, AntialiasArgs, a, k) {
  return antialias_backward_cuda(a, k.stream, k.workspace);
}

}  // namespace prerast
