// The prerast operator library. Each op's schema is declared next to its implementation with
// PRERAST_LIBRARY_FRAGMENT; this file declares the library itself and an op describing the binary. The CUDA part
// compiles every binding too (prerast_meta/sources.py), but declares nothing: the CPU part's declarations hold.
// Both parts export prerast_attach_kernels, through which the loader hands each its kernel library.
#include "common.h"

// The kernel library's table (core/kernel_table.h: prerast_kernel_table() of the library the loader chose) for
// this binding library; returns nullptr, or why the table cannot serve it (nothing is attached then).
extern "C" PRERAST_EXPORT const char* prerast_attach_kernels(const prerast::KernelTable* table) {
#ifdef PRERAST_CUDA_LIBRARY
  const char* problem = prerast::kernel_table_problem(table, true);
#else
  const char* problem = prerast::kernel_table_problem(table, false);
#endif
  if (problem == nullptr) prerast::attached_kernels() = table;
  return problem;
}

#ifndef PRERAST_CUDA_LIBRARY

#if defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#elif defined(__linux__) || defined(__APPLE__)
#include <unistd.h>
#endif

uint64_t prerast::physical_memory() {
#if defined(_WIN32)
  MEMORYSTATUSEX status;
  status.dwLength = sizeof status;
  return GlobalMemoryStatusEx(&status) ? (uint64_t)status.ullTotalPhys : 0;
#elif defined(__linux__) || defined(__APPLE__)
  const auto pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
#else
  return 0;
#endif
}

// The CPU output cache (output_cache.h), for prerast.empty_cache() and the tests, through ctypes (_output_cache.py):
// frees every released block and returns the bytes freed.
extern "C" PRERAST_EXPORT int64_t prerast_output_cache_empty() { return (int64_t)prerast::output_cache().empty(); }

// Fills out[0..5] with bytes held, blocks held, the bound in bytes, blocks reused, blocks newly allocated and blocks
// in use by live tensors.
extern "C" PRERAST_EXPORT void prerast_output_cache_stats(int64_t* out) {
  const prerast::OutputCache::Stats s = prerast::output_cache().stats();
  const int64_t values[] = {s.held_bytes, s.held_blocks, s.limit, s.reused, s.allocated, s.live_blocks};
  for (int i = 0; i < 6; ++i) out[i] = values[i];
}

// For tests: the bound in bytes (negative: PRERAST_CPU_OUTPUT_CACHE_MB or the default again) and whether blocks
// are handed out filled with NaN.
extern "C" PRERAST_EXPORT void prerast_output_cache_configure(int64_t limit, int poison) {
  prerast::output_cache().configure(limit, poison != 0);
}

namespace {

// The version setup.py builds, as its characters' codes (prerast_meta/compiler_flags.py's version_define says why).
#ifdef PRERAST_VERSION_BYTES
constexpr char kVersion[] = {PRERAST_VERSION_BYTES, 0};
#else
constexpr char kVersion[] = "unknown";
#endif

// "version=0.1.0;abi=stable": what this library was built as, readable without _build_info.json (the tests compare
// builds with it). Whether CUDA kernels are loaded is the loader's knowledge: they live in a library of their own.
std::string binary_info() { return std::string("version=") + kVersion + ";abi=" + prerast::kAbi; }

}  // namespace

PRERAST_LIBRARY(m) { m.def("binary_info() -> str"); }

PRERAST_LIBRARY_IMPL(CompositeImplicitAutograd, m) { m.impl("binary_info", PRERAST_KERNEL(binary_info)); }
#endif
