// The few compiler extensions the CPU loops use, with plain C++ in their place where the compiler lacks them (MSVC):
// cache prefetches, the lowest set bit, and small float/double vectors (GCC's and clang's vector extensions). Every
// replacement does the same float operations in the same order, so the results have the same bits either way;
// -DPRERAST_PORTABLE selects the replacements with GCC and clang too (tests/core/test_core_platforms.py builds both).
#pragma once

#include <cstdint>

#if (defined(__GNUC__) || defined(__clang__)) && !defined(PRERAST_PORTABLE)
#define PRERAST_GNU_BUILTINS 1
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#include <xmmintrin.h>
#endif

namespace prerast {

// Hints that p will be read (or written) soon. Never faults, whatever p is.
inline void prefetch(const void* p) {
#if defined(PRERAST_GNU_BUILTINS)
  __builtin_prefetch(p);
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
  _mm_prefetch((const char*)p, _MM_HINT_T0);
#else
  (void)p;
#endif
}

inline void prefetch_for_write(const void* p) {
#if defined(PRERAST_GNU_BUILTINS)
  __builtin_prefetch(p, 1);
#else
  prefetch(p);
#endif
}

// The index of the lowest set bit of x != 0.
inline int lowest_bit(uint32_t x) {
#if defined(PRERAST_GNU_BUILTINS)
  return __builtin_ctz(x);
#else
  int i = 0;
  for (; !(x & 1u); x >>= 1) ++i;
  return i;
#endif
}

// Vectors of two or four floats or doubles (at most one SSE2 register): element-wise += and * by a scalar, [],
// float4() to make one and widen() from floats to doubles (exact, element by element).
#if defined(PRERAST_GNU_BUILTINS)
typedef float Float2 __attribute__((vector_size(8)));
typedef double Double2 __attribute__((vector_size(16)));
typedef float Float4 __attribute__((vector_size(16)));
inline Double2 widen(Float2 x) { return __builtin_convertvector(x, Double2); }
inline Float4 float4(float a, float b, float c, float d) { return Float4{a, b, c, d}; }
#else
template <class T, int N>
struct SmallVec {
  T e[N];
  T operator[](int i) const { return e[i]; }
  SmallVec& operator+=(const SmallVec& o) {
    for (int i = 0; i < N; ++i) e[i] += o.e[i];
    return *this;
  }
  friend SmallVec operator*(SmallVec v, T s) {
    for (int i = 0; i < N; ++i) v.e[i] *= s;
    return v;
  }
};
using Float2 = SmallVec<float, 2>;
using Double2 = SmallVec<double, 2>;
using Float4 = SmallVec<float, 4>;
inline Double2 widen(Float2 x) { return Double2{{(double)x.e[0], (double)x.e[1]}}; }
inline Float4 float4(float a, float b, float c, float d) { return Float4{{a, b, c, d}}; }
#endif

}  // namespace prerast
