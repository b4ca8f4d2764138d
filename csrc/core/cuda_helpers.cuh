// Small helpers for the CUDA halves of the core (included by .cu files only).
#pragma once

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.h"

// Returns the CUDA error string from the enclosing entry point when expr fails.
#define PR_CUDA_TRY(expr)                                     \
  do {                                                        \
    cudaError_t err_ = (expr);                                \
    if (err_ != cudaSuccess) return cudaGetErrorString(err_); \
  } while (0)

// Returns from the enclosing entry point the message of a helper that failed (nullptr is success).
#define PR_CUDA_TRY_MSG(expr)                   \
  do {                                          \
    if (const char* msg_ = (expr)) return msg_; \
  } while (0)

namespace prerast {

inline unsigned grid_for(int64_t n, int per_block) { return (unsigned)((n + per_block - 1) / per_block); }

// *p += v for the backward kernels' scatter-adds. Every pixel of a large triangle adds into the same three
// vertices (and a magnified texture's pixels into the same texels): plain atomics on one address serialize. Lanes
// of a warp that add to the same address first sum their values (a shuffle reduction); one issues the atomic.
template <class T>
__device__ inline void add_grouped(T* p, T v) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700  // labeled_partition needs sm_70; older archs add one by one
  namespace cg = cooperative_groups;
  const cg::coalesced_group active = cg::coalesced_threads();
  const cg::coalesced_group same = cg::labeled_partition(active, (unsigned long long)p);
  const T sum = same.size() == 1 ? v : cg::reduce(same, v, cg::plus<T>());
  if (same.thread_rank() == 0) atomicAdd(p, sum);
#else
  atomicAdd(p, v);
#endif
}

// A float gradient of n elements summed in double on the device: the backward kernels add into acc (zeroed by
// begin), and finish rounds it once into out. Millions of float atomics into one element (every pixel of a large
// triangle adds into its three vertices) would lose digits; in double they do not. Where the work (contributions)
// is smaller than the gradient, most elements get few contributions: acc stays null and kernels add into out. So
// does a gradient of over kMaxWideSumElements: a double copy of a gradient that large (2x its size, on top of it)
// could exhaust the device where the float sums fit, and its elements get few contributions each on average.
constexpr int64_t kMaxWideSumElements = int64_t(1) << 27;  // a 1 GiB double copy

struct WideSum {
  double* acc = nullptr;
  float* out = nullptr;
  int64_t n = 0;
  __device__ void add(int64_t i, float v) const {
    if (acc)
      add_grouped(acc + i, (double)v);
    else
      add_grouped(out + i, v);
  }
};
const char* wide_sum_begin(WideSum& w, float* out, int64_t n, int64_t work, const Workspace& ws, cudaStream_t stream);
const char* wide_sum_finish(const WideSum& w, cudaStream_t stream);

}  // namespace prerast
