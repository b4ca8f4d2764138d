#include "cuda_helpers.cuh"
#include "kernel_entry.h"
#include "upload.h"

namespace prerast {

namespace {

constexpr int kPerLaunch = 256;  // 1 KB of kernel arguments, well under the 4 KB limit

struct Chunk {
  int32_t v[kPerLaunch];
};

__global__ void upload_kernel(Chunk c, int n, int32_t* dst) {
  if (threadIdx.x < n) dst[threadIdx.x] = c.v[threadIdx.x];
}

}  // namespace

const char* upload_int32_cuda(const int32_t* values, int64_t n, int32_t* dst, StreamHandle stream) {
  for (int64_t first = 0; first < n; first += kPerLaunch) {
    const int count = (int)(n - first < kPerLaunch ? n - first : kPerLaunch);
    Chunk c;
    for (int i = 0; i < count; ++i) c.v[i] = values[first + i];
    upload_kernel<<<1, kPerLaunch, 0, (cudaStream_t)stream>>>(c, count, dst + first);
    PR_CUDA_TRY(cudaGetLastError());
  }
  return nullptr;
}

}  // namespace prerast

// The entry points of the kernel library (kernel_entry.h).
namespace prerast {

PRERAST_CUDA_ENTRY(upload_int32_cuda, UploadArgs, a, k) { return upload_int32_cuda(a.values, a.n, a.dst, k.stream); }

}  // namespace prerast
