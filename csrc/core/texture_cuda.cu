// CUDA texture sampling: one thread per output pixel (or per texel for mip construction) running the
// per-pixel math of texture.h. Texture gradients are scattered with atomicAdd.
#include "cuda_helpers.cuh"
#include "kernel_entry.h"
#include "texture.h"

namespace prerast {

namespace {

// Level l's gradient lives at levels + offset[l] (float: the output itself; double: the WideSum of it).
template <class Acc>
struct AtomicAdd {
  Acc* levels;
  int64_t offset[kMaxMipLevels];
  __device__ void operator()(int level, int64_t i, float v) const { add_grouped(levels + offset[level] + i, (Acc)v); }
};

__global__ void forward_kernel(TextureArgs a) {
  const int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (p < a.num_pixels) texture_forward_pixel(a, p);
}

template <class Acc>
__global__ void backward_kernel(TextureGradArgs g, AtomicAdd<Acc> add) {
  const int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (p >= g.a.num_pixels) return;
  texture_backward_pixel(g, p, add);
}

__global__ void mip_down_kernel(const float* src, int64_t B, int sh, int sw, int C, float* dst) {
  const int dh = mip_size(sh), dw = mip_size(sw);
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= B * dh * dw) return;
  mip_down_texel(src, sh, sw, C, dst, i / ((int64_t)dh * dw), (int)(i / dw % dh), (int)(i % dw));
}

__global__ void mip_down_adjoint_kernel(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad,
                                        bool accumulate) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= B * sh * sw) return;
  const int x = (int)(i % sw);
  mip_down_adjoint_row(grad_next, sh, sw, C, grad, i / ((int64_t)sh * sw), (int)(i / sw % sh), x, x + 1, accumulate);
}

}  // namespace

const char* texture_forward_cuda(const TextureArgs& a, StreamHandle stream) {
  if (a.num_pixels == 0) return nullptr;
  forward_kernel<<<grid_for(a.num_pixels, 256), 256, 0, (cudaStream_t)stream>>>(a);
  PR_CUDA_TRY(cudaGetLastError());
  return nullptr;
}

const char* texture_backward_cuda(const TextureGradArgs& g, StreamHandle stream_handle, const Workspace& ws) {
  cudaStream_t stream = (cudaStream_t)stream_handle;
  const TextureArgs& a = g.a;
  if (a.num_pixels == 0) return nullptr;
  // The levels' gradients are contiguous, level 0 first (as on the CPU).
  int64_t offset[kMaxMipLevels] = {};
  for (int l = 1; l < a.num_levels; ++l) offset[l] = offset[l - 1] + level_elements(a, l - 1);
  const unsigned grid = grid_for(a.num_pixels, 256);
  // In double where texels get many contributions (the CPU's rule), unless the copy would be too large.
  WideSum sum;
  if (wide_texture_sums(a))
    PR_CUDA_TRY_MSG(wide_sum_begin(sum, g.grad_levels[0], gradient_elements(a), gradient_elements(a), ws, stream));
  if (!sum.acc) {
    AtomicAdd<float> add{g.grad_levels[0], {}};
    for (int l = 0; l < a.num_levels; ++l) add.offset[l] = offset[l];
    backward_kernel<<<grid, 256, 0, stream>>>(g, add);
    PR_CUDA_TRY(cudaGetLastError());
    return nullptr;
  }
  AtomicAdd<double> add{sum.acc, {}};
  for (int l = 0; l < a.num_levels; ++l) add.offset[l] = offset[l];
  backward_kernel<<<grid, 256, 0, stream>>>(g, add);
  PR_CUDA_TRY(cudaGetLastError());
  return wide_sum_finish(sum, stream);
}

const char* mip_down_cuda(const float* src, int64_t B, int sh, int sw, int C, float* dst, StreamHandle stream) {
  const int64_t n = B * mip_size(sh) * mip_size(sw);
  if (n == 0) return nullptr;
  mip_down_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(src, B, sh, sw, C, dst);
  PR_CUDA_TRY(cudaGetLastError());
  return nullptr;
}

const char* mip_down_adjoint_cuda(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad,
                                  bool accumulate, StreamHandle stream) {
  const int64_t n = B * sh * sw;
  if (n == 0) return nullptr;
  mip_down_adjoint_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(grad_next, B, sh, sw, C, grad,
                                                                              accumulate);
  PR_CUDA_TRY(cudaGetLastError());
  return nullptr;
}

}  // namespace prerast

// The entry points of the kernel library (kernel_entry.h).
namespace prerast {

PRERAST_CUDA_ENTRY(texture_forward_cuda, TextureArgs, a, k) { return texture_forward_cuda(a, k.stream); }
PRERAST_CUDA_ENTRY(texture_backward_cuda, TextureGradArgs, g, k) {
  return texture_backward_cuda(g, k.stream, k.workspace);
}
PRERAST_CUDA_ENTRY(mip_down_cuda, MipArgs, m, k) {
  return mip_down_cuda(m.src, m.batch, m.height, m.width, m.channels, m.dst, k.stream);
}
PRERAST_CUDA_ENTRY(mip_down_adjoint_cuda, MipArgs, m, k) {
  return mip_down_adjoint_cuda(m.src, m.batch, m.height, m.width, m.channels, m.dst, m.accumulate, k.stream);
}

}  // namespace prerast
