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

PR_HD bool all_finite(const float* p, int n) {
  bool ok = true;
  for (int k = 0; k < n; ++k) ok = ok && isfinite(p[k]);
  return ok;
}
PR_HD bool finite4(const float* p) { return all_finite(p, 4); }

// --- scaling by powers of two ------------------------------------------------------------------------------
//
// Clip-space positions are homogeneous and cube-map lookups take directions, so their scale carries no
// meaning; the math brings them to a fixed range first by a power of two, which changes the exponent alone.
// Scaling a float by 2^k through double is exact in double and rounds once when converted back (only where
// the result is subnormal or out of float range), so a value scaled by a power of two normalises to the same
// bits as the value itself.

// The bits of x read as a To of the same size (C++20's std::bit_cast, on the host and the device alike).
template <class To, class From>
PR_HD To bit_cast(From x) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs types of the same size");
  To to;
  memcpy(&to, &x, sizeof to);
  return to;
}

// 2^k as a double, for k in [-1022, 1023].
PR_HD double pow2d(int k) { return bit_cast<double>((uint64_t)(1023 + k) << 52); }

// 2^k as a float, for k in [-126, 127].
PR_HD float pow2f(int k) { return bit_cast<float>((uint32_t)(127 + k) << 23); }

// x * 2^k rounded to float, for k in [-1022, 1023]. Where 2^k is a normal float, one float multiply rounds the
// same exact product once.
PR_HD float scale_pow2(float x, int k) {
  if (k >= -126 && k <= 127) return x * pow2f(k);
  return (float)((double)x * pow2d(k));
}

// floor(log2(m)) for finite m > 0, subnormals included: in [-149, 127].
PR_HD int float_exponent(float m) {
  const int ex = (int)(bit_cast<uint32_t>(m) >> 23 & 0xff);
  // A subnormal times 2^64 is a normal number, exactly.
  return ex ? ex - 127 : (int)(bit_cast<uint32_t>(m * 0x1p64f) >> 23 & 0xff) - 127 - 64;
}

// The exponent e that brings the largest |p[i]| of n finite values into [1, 2) when p is scaled by 2^-e; 0
// when all are zero.
PR_HD int normalising_exponent(const float* p, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = fabsf(p[i]) > m ? fabsf(p[i]) : m;
  return m > 0.0f ? float_exponent(m) : 0;
}

// log2(x) rounded to float, from IEEE float and double arithmetic alone, so that it gives the same bits with every
// compiler, C library and on the GPU; libm's log2f does not (glibc's, the Windows runtimes' and CUDA's differ in the
// last bit for some inputs). x = 2^e m with m in [sqrt(1/2), sqrt(2)) and log2(m) = 2 atanh(s) / ln 2 for
// s = (m - 1) / (m + 1), |s| < 0.172: the series of atanh to s^23 leaves a relative error below 1e-17, so the one
// rounding to float at the end is the correct one except within about 1e-16 of a float rounding boundary.
PR_HD float log2_float(float x) {
  if (!(x > 0.0f)) return x == 0.0f ? -INFINITY : NAN;
  if (x == INFINITY) return INFINITY;
  int e = float_exponent(x);
  double m = (double)x * pow2d(-e);  // exact, in [1, 2)
  if (m > 1.4142135623730951) m *= 0.5, ++e;
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double p = 1.0 / 23.0;
  p = p * s2 + 1.0 / 21.0, p = p * s2 + 1.0 / 19.0, p = p * s2 + 1.0 / 17.0, p = p * s2 + 1.0 / 15.0;
  p = p * s2 + 1.0 / 13.0, p = p * s2 + 1.0 / 11.0, p = p * s2 + 1.0 / 9.0, p = p * s2 + 1.0 / 7.0;
  p = p * s2 + 1.0 / 5.0, p = p * s2 + 1.0 / 3.0, p = p * s2 + 1.0;
  return (float)((double)e + 2.8853900817779268 * s * p);  // 2 / ln 2
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
  return bit_cast<float>(kTriangleIdBits + n);
}

// Inverse of encode_triangle_id; values that are no stored ID (NaN, below 1) read as 0, background.
PR_HD int32_t decode_triangle_id(float f) {
  if (!(f >= 1.0f)) return 0;
  if (f <= 16777216.0f) return (int32_t)f;
  return bit_cast<int32_t>(f) - kTriangleIdBits;  // +inf gives one more than the largest ID: outside every mesh
}

}  // namespace prerast
