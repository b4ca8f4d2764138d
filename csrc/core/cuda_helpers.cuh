// Small helpers for the CUDA halves of the core (included by .cu files only).
#pragma once

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_runtime.h>

#include <cstdint>

// Returns the CUDA error string from the enclosing entry point when expr fails.
#define PR_CUDA_TRY(expr)                                     \
  do {                                                        \
    cudaError_t err_ = (expr);                                \
    if (err_ != cudaSuccess) return cudaGetErrorString(err_); \
  } while (0)

namespace prerast {

inline unsigned grid_for(int64_t n, int per_block) { return (unsigned)((n + per_block - 1) / per_block); }

// *p += v for the backward kernels' scatter-adds. Every pixel of a large triangle adds into the same three
// vertices (and a magnified texture's pixels into the same texels): plain atomics on one address serialize. Lanes
// of a warp that add to the same address first sum their values (a shuffle reduction); one issues the atomic.
__device__ inline void add_grouped(float* p, float v) {
  namespace cg = cooperative_groups;
  const cg::coalesced_group active = cg::coalesced_threads();
  const cg::coalesced_group same = cg::labeled_partition(active, (unsigned long long)p);
  const float sum = same.size() == 1 ? v : cg::reduce(same, v, cg::plus<float>());
  if (same.thread_rank() == 0) atomicAdd(p, sum);
}

}  // namespace prerast
