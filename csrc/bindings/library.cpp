// The prerast operator library. Each op's schema is declared next to its implementation with
// TORCH_LIBRARY_FRAGMENT; this file declares the library itself and an op describing the binary.
#include <torch/library.h>

#include <string>

#ifndef PRERAST_VERSION
#define PRERAST_VERSION "unknown"
#endif

namespace {

std::string binary_info() {
#ifdef PRERAST_WITH_CUDA
  return std::string("version=") + PRERAST_VERSION + ";cuda=1";
#else
  return std::string("version=") + PRERAST_VERSION + ";cuda=0";
#endif
}

}  // namespace

TORCH_LIBRARY(prerast, m) {
  m.def("binary_info() -> str", &binary_info);
}
