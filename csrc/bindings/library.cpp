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
