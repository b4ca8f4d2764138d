#include "cuda_helpers.cuh"

namespace prerast {

namespace {

__global__ void round_kernel(const double* acc, float* out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = (float)((double)out[i] + acc[i]);
}

}  // namespace

const char* wide_sum_begin(WideSum& w, float* out, int64_t n, int64_t work, const Workspace& ws, cudaStream_t stream) {
  w.out = out, w.n = n;
  w.acc = n > 0 && n <= work && n <= kMaxWideSumElements ? (double*)ws.get(n * sizeof(double)) : nullptr;
  if (w.acc) PR_CUDA_TRY(cudaMemsetAsync(w.acc, 0, n * sizeof(double), stream));
  return nullptr;
}

const char* wide_sum_finish(const WideSum& w, cudaStream_t stream) {
  if (!w.acc) return nullptr;
  round_kernel<<<grid_for(w.n, 256), 256, 0, stream>>>(w.acc, w.out, w.n);
  PR_CUDA_TRY(cudaGetLastError());
  return nullptr;
}

}  // namespace prerast
