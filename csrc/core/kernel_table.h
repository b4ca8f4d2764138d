// The C interface of a kernel library: what a binding calls, whatever compiler, torch or C++ ABI flag built it.
//
// csrc/core compiles into torch-free shared libraries, one per compute: the CPU kernels, and the CUDA kernels once
// per CUDA major. Each exports one C function, prerast_kernel_table(), returning a table of entry points. The
// bindings (csrc/bindings, one build per torch ABI) are handed a table at load (prerast_attach_kernels) and call
// only through it, so that one kernel library serves every binding, and a binding's CUDA part serves every CUDA
// major: it gets the stream from torch and passes it on as an opaque handle.
//
// Only plain structs (the *Args of the core headers: pointers, integers, floats, bools), pointers, C function
// pointers and C strings cross the boundary; no exception, std:: type or allocation does. Every entry returns
// nullptr on success or a message saying what failed (valid until the next call on the same thread). A change to
// this table or to any struct it passes bumps kKernelInterface, which both sides compare at load.
#pragma once

#include <cstdint>

#include "antialias.h"
#include "interpolate.h"
#include "rasterize.h"
#include "texture.h"

#if defined(_WIN32)
#define PRERAST_EXPORT __declspec(dllexport)
#else
#define PRERAST_EXPORT __attribute__((visibility("default")))
#endif

namespace prerast {

constexpr uint32_t kKernelInterface = 1;

extern "C" {

// The host thread pool, given by the binding (torch's intra-op pool): run(self, n, grain, body, ctx) calls
// body(ctx, begin, end) over [0, n) from any of its threads and returns when all are done.
typedef void (*RangeBody)(void* ctx, int64_t begin, int64_t end);
struct HostPool {
  void (*run)(void* self, int64_t n, int64_t grain, RangeBody body, void* ctx);
  void* self;
};

struct KernelTable {
  uint32_t interface_version;  // kKernelInterface of the library's build
  uint32_t size;               // sizeof(KernelTable) there
  const char* compute;         // "cpu", or "cuda" with the toolkit version: "cuda 12.4"

  // CPU entries (null in a CUDA library).
  const char* (*rasterize_forward_cpu)(const RasterArgs* a, const HostPool* pool);
  const char* (*rasterize_backward_cpu)(const RasterGradArgs* a, const HostPool* pool, int num_chunks);
  const char* (*interpolate_forward_cpu)(const InterpArgs* a, const HostPool* pool);
  const char* (*interpolate_backward_cpu)(const InterpArgs* a, const HostPool* pool, int num_chunks,
                                          int64_t max_extra_bytes);
  const char* (*texture_forward_cpu)(const TextureArgs* a, const HostPool* pool);
  const char* (*texture_backward_cpu)(const TextureGradArgs* g, const HostPool* pool, int num_threads);
  const char* (*mip_down_cpu)(const float* src, int64_t B, int sh, int sw, int C, float* dst, const HostPool* pool);
  const char* (*mip_down_adjoint_cpu)(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad,
                                      bool accumulate, const HostPool* pool);
  const char* (*antialias_forward_cpu)(const AntialiasArgs* a, const HostPool* pool);
  const char* (*antialias_backward_cpu)(const AntialiasArgs* a, const HostPool* pool, int num_chunks);

  // CUDA entries (null in the CPU library): queued on `stream` (a cudaStream_t of the library's CUDA major).
  const char* (*rasterize_forward_cuda)(const RasterArgs* a, StreamHandle stream, const Workspace* ws);
  const char* (*rasterize_backward_cuda)(const RasterGradArgs* a, StreamHandle stream, const Workspace* ws);
  const char* (*interpolate_forward_cuda)(const InterpArgs* a, StreamHandle stream);
  const char* (*interpolate_backward_cuda)(const InterpArgs* a, StreamHandle stream, const Workspace* ws);
  const char* (*texture_forward_cuda)(const TextureArgs* a, StreamHandle stream);
  const char* (*texture_backward_cuda)(const TextureGradArgs* g, StreamHandle stream, const Workspace* ws);
  const char* (*mip_down_cuda)(const float* src, int64_t B, int sh, int sw, int C, float* dst, StreamHandle stream);
  const char* (*mip_down_adjoint_cuda)(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad,
                                       bool accumulate, StreamHandle stream);
  const char* (*antialias_forward_cuda)(const AntialiasArgs* a, StreamHandle stream);
  const char* (*antialias_backward_cuda)(const AntialiasArgs* a, StreamHandle stream, const Workspace* ws);
  const char* (*upload_int32_cuda)(const int32_t* values, int64_t n, int32_t* dst, StreamHandle stream);
  const char* (*check_indices_cuda)(const int32_t* tri, int64_t n, int64_t num_vertices, StreamHandle stream);
  const char* (*check_topology_table_cuda)(const int32_t* table, int64_t n, int64_t bound, StreamHandle stream);
  const char* (*check_triangle_ids_cuda)(const float* rast, int64_t num_pixels, int64_t num_triangles,
                                         StreamHandle stream);
};

// Exported by each kernel library: its table, which lives as long as the library.
PRERAST_EXPORT const KernelTable* prerast_kernel_table(void);

}  // extern "C"
}  // namespace prerast
