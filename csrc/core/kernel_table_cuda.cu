// The CUDA kernel library's table (kernel_table.h), one build per CUDA major: the entries the .cu files
// registered, and the toolkit they were compiled with.
#include <cuda_runtime.h>

#include <string>

#include "kernel_entry.h"

extern "C" PRERAST_EXPORT const prerast::KernelTable* prerast_kernel_table(void) {
  // "cuda 12.4" (CUDART_VERSION is major * 1000 + minor * 10).
  static const std::string compute =
      "cuda " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
  return prerast::make_kernel_table(compute.c_str());
}
