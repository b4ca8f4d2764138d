// Which SIMD path the CPU rasterizer's tile shading takes: the widest the build has and the CPU runs (AVX-512, then
// AVX2, then scalar), capped by the environment variable PRERAST_CPU_SIMD (avx512, avx2 or scalar), which the
// library reads once, at its first rasterization. Every path gives the same bits; the variable is there so that
// tests can compare the paths on one machine and benchmarks can time them.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "raster_tile_avx512.h"

namespace prerast {

enum class CpuSimd { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

inline CpuSimd cpu_simd_available() {
#ifdef PRERAST_HAVE_AVX512_PATH
  if (cpu_has_avx512()) return CpuSimd::kAvx512;
#endif
#ifdef PRERAST_HAVE_AVX2_PATH
  if (cpu_has_avx2()) return CpuSimd::kAvx2;
#endif
  return CpuSimd::kScalar;
}

// The path to take; throws std::invalid_argument (every call) where PRERAST_CPU_SIMD names none.
inline CpuSimd cpu_simd_path() {
  struct Choice {
    CpuSimd path;
    std::string error;  // empty where the variable is understood
  };
  static const Choice choice = [] {
    const CpuSimd best = cpu_simd_available();
    const char* v = std::getenv("PRERAST_CPU_SIMD");
    if (v == nullptr || *v == '\0') return Choice{best, {}};
    const char* names[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; ++i)
      if (std::strcmp(v, names[i]) == 0) return Choice{(CpuSimd)std::min(i, (int)best), {}};
    return Choice{best, std::string("PRERAST_CPU_SIMD='") + v +
                            "' is not understood: use avx512, avx2 or scalar, or leave it unset for the fastest"};
  }();
  if (!choice.error.empty()) throw std::invalid_argument(choice.error);
  return choice.path;
}

}  // namespace prerast
