// Small helpers for the CUDA halves of the core (included by .cu files only).
#pragma once

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

}  // namespace prerast
