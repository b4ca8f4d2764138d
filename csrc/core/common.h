// Shared building blocks for prerast's torch-free core.
//
// Everything here compiles both as plain C++ (the CPU path) and under nvcc (the CUDA path). Math that both
// backends need is written once as PR_HD functions, so the CPU tests check the GPU arithmetic too. The CUDA
// sources are compiled with --fmad=false so that no multiply-add is contracted on one side only.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>

#if defined(__CUDACC__)
#define PR_HD __host__ __device__ __forceinline__
#else
#define PR_HD inline
#endif

namespace prerast {

#if !defined(__CUDACC__)
using std::isfinite;
#endif

// An opaque CUDA stream (cudaStream_t) so that headers stay free of CUDA and torch.
using StreamHandle = void*;

// Scratch memory for the CUDA path, provided by the binding (backed by torch's caching allocator) so that
// the core never calls cudaMalloc itself. Memory stays valid until the op returns.
struct Workspace {
  void* (*alloc)(void* self, size_t bytes) = nullptr;
  void* self = nullptr;
  void* get(size_t bytes) const { return alloc(self, bytes); }
};

// Runs fn(begin, end) over [0, n) in parallel on the host. The binding passes one backed by torch's
// intra-op thread pool.
using ParallelFor = std::function<void(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn)>;

struct V3 {
  float x, y, z;
};

PR_HD V3 cross3(V3 a, V3 b) { return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x}; }
PR_HD float dot3(V3 a, V3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }

PR_HD bool finite4(const float* p) {
  return isfinite(p[0]) && isfinite(p[1]) && isfinite(p[2]) && isfinite(p[3]);
}

// NDC coordinate of the centre of pixel i along an axis of `size` pixels: (2i + 1) / size - 1.
PR_HD float pixel_center_ndc(int i, int size) { return (float)(2 * i + 1) / (float)size - 1.0f; }

PR_HD int clampi(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

}  // namespace prerast
