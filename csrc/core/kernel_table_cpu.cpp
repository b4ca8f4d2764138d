// The CPU kernel library's table (kernel_table.h): the entries the *_cpu.cpp files registered.
#include "kernel_entry.h"

extern "C" PRERAST_EXPORT const prerast::KernelTable* prerast_kernel_table(void) {
  return prerast::make_kernel_table("cpu");
}
