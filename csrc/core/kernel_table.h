// The C interface of a kernel library: what a binding calls, whatever compiler, torch or C++ ABI flag built it.
//
// csrc/core compiles into torch-free shared libraries, one per compute: the CPU kernels, and the CUDA kernels once
// per CUDA major. Each exports one C function, prerast_kernel_table(), whose table finds the library's entry
// points by name ("rasterize_forward_cpu"). The bindings (csrc/bindings, one build per torch ABI) are handed a
// table at load (prerast_attach_kernels) and call only through it, so that one kernel library serves every binding
// and a binding's CUDA part serves every CUDA major: it gets the stream from torch and passes it on, opaque.
//
// Every entry has one C signature: (the op's argument struct, the context of the call). Only plain structs (the
// *Args of the core headers: pointers, integers, floats, bools), pointers, C function pointers and C strings cross
// the boundary; no exception, std:: type or allocation does. An entry returns nullptr on success or a message
// saying what failed (valid until the next call on the same thread), and writes the failure's kind to the
// context, so that the binding raises the exception that kind calls for (torch.OutOfMemoryError for memory). An op's
// entries are defined next to its kernels (kernel_entry.h's PRERAST_CPU_ENTRY / PRERAST_CUDA_ENTRY), so a new op adds
// no line here. A change to this file or to any argument struct bumps kKernelInterface, which both sides compare at
// load.
#pragma once

#include <cstdint>

#include "common.h"

#if defined(_WIN32)
#define PRERAST_EXPORT __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define PRERAST_EXPORT __attribute__((visibility("default")))
#else
#define PRERAST_EXPORT
#endif

namespace prerast {

constexpr uint32_t kKernelInterface = 2;

extern "C" {

// The host thread pool, given by the binding (torch's intra-op pool): run(self, n, grain, body, ctx) calls
// body(ctx, begin, end) over [0, n) from any of its threads and returns when all are done.
typedef void (*RangeBody)(void* ctx, int64_t begin, int64_t end);
struct HostPool {
  void (*run)(void* self, int64_t n, int64_t grain, RangeBody body, void* ctx);
  void* self;
};

// What kind of failure a call's message reports: memory that could not be had (std::bad_alloc in the library, a
// null from the Workspace) or any other error (bad data, a CUDA error).
enum KernelFailure : int32_t { kKernelError = 0, kKernelOutOfMemory = 1 };

// What a call runs with besides its arguments: the CPU's thread pool and thread count, or the CUDA stream (a
// cudaStream_t of the library's CUDA major) and scratch memory (Workspace: alloc returns null on failure).
struct KernelContext {
  const HostPool* pool;
  int num_threads;
  StreamHandle stream;
  const Workspace* workspace;
  KernelFailure* failure;  // where a failed call writes its kind (null: not asked)
};

typedef const char* (*KernelEntry)(const void* args, const KernelContext* context);

struct KernelTable {
  uint32_t interface_version;             // kKernelInterface of the library's build
  uint32_t size;                          // sizeof(KernelTable) there
  const char* compute;                    // "cpu", or "cuda" with the toolkit version: "cuda 12.4"
  KernelEntry (*find)(const char* name);  // the entry of that name, or null
};

// Exported by each kernel library: its table, which lives as long as the library.
PRERAST_EXPORT const KernelTable* prerast_kernel_table(void);

}  // extern "C"
}  // namespace prerast
