// Shared building blocks for prerast's torch-free core.
//
// Everything here compiles both as plain C++ (the CPU path) and under nvcc (the CUDA path). Math that both
// backends need is written once as PR_HD functions, so the CPU tests check the GPU arithmetic too. The CUDA
// sources are compiled with --fmad=false so that no multiply-add is contracted on one side only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
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

// rast[..., 3] holds n = triangle index + 1 (0: background) in float32, as nvdiffrast stores it: n up to 2^24
// as the number itself, larger n as the float whose bit pattern is 0x4a800000 + n. The two agree at 2^24 and
// the encoding increases with n, so float comparisons of stored IDs order them like the IDs. The largest n is
// 0x7f7fffff - 0x4a800000 (the largest finite float).
constexpr int32_t kTriangleIdBits = 0x4a800000;
constexpr int32_t kMaxEncodedTriangleId = 0x7f7fffff - kTriangleIdBits;

PR_HD float encode_triangle_id(int32_t n) {
  if (n <= (1 << 24)) return (float)n;
  const int32_t bits = kTriangleIdBits + n;
#if defined(__CUDA_ARCH__)
  return __int_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// Inverse of encode_triangle_id; values that are no stored ID (NaN, below 1) read as 0, background.
PR_HD int32_t decode_triangle_id(float f) {
  if (!(f >= 1.0f)) return 0;
  if (f <= 16777216.0f) return (int32_t)f;
#if defined(__CUDA_ARCH__)
  const int32_t bits = __float_as_int(f);
#else
  int32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
#endif
  return bits - kTriangleIdBits;  // +inf gives one more than the largest ID: outside every mesh
}

}  // namespace prerast
