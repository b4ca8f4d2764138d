// The bindings' side of the kernel library's C interface (core/kernel_table.h): the table the loader attached to
// this library (prerast_attach_kernels, library.cpp), and one call per core entry point that goes through it.
// Torch's exceptions stay on this side: the thread pool and the scratch allocator handed to the kernel library
// catch them, report a failure across the boundary, and the call raises them again here.
#pragma once

#include <exception>

#include "../core/kernel_table.h"

namespace prerast {

// The kernel library this binding calls (one per binding library: the CPU part holds the CPU kernels' table, the
// CUDA part that of the CUDA major the loader chose). Set once at load, before any op runs.
inline const KernelTable*& attached_kernels() {
  static const KernelTable* table = nullptr;
  return table;
}

// Why `t` cannot serve this binding library, or nullptr.
inline const char* kernel_table_problem(const KernelTable* t, bool cuda) {
  if (t == nullptr) return "the kernel library gave no table";
  if (t->interface_version != kKernelInterface || t->size != sizeof(KernelTable))
    return "the kernel library's interface version differs from this binding's (parts of two prerast builds?)";
  if (cuda ? t->rasterize_forward_cuda == nullptr : t->rasterize_forward_cpu == nullptr)
    return cuda ? "the CUDA binding was handed a kernel library without CUDA kernels"
                : "the CPU binding was handed a kernel library without CPU kernels";
  return nullptr;
}

inline const KernelTable& kernel_table() {
  const KernelTable* t = attached_kernels();
  PR_CHECK(t != nullptr, "prerast's kernel library is not attached to its binding (python -m prerast doctor says why)");
  return *t;
}

// torch's intra-op thread pool as the kernel library's HostPool. An exception of torch's is kept for rethrow().
class TorchPool {
 public:
  TorchPool() {
    pool_.run = &run;
    pool_.self = this;
  }
  const HostPool* get() const { return &pool_; }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static void run(void* self, int64_t n, int64_t grain, RangeBody body, void* ctx) {
    auto* me = static_cast<TorchPool*>(self);
    try {
      facade::parallel_for(n, grain, [body, ctx](int64_t begin, int64_t end) { body(ctx, begin, end); });
    } catch (...) {
      if (!me->error_) me->error_ = std::current_exception();
    }
  }
  HostPool pool_;
  std::exception_ptr error_;
};

namespace kernels {

// Runs call(table, pool) on the CPU kernels; raises what failed.
template <class Call>
void on_cpu(Call call) {
  const KernelTable& t = kernel_table();
  TorchPool pool;
  const char* err = call(t, pool.get());
  pool.rethrow();
  PR_CHECK(err == nullptr, "prerast's CPU kernels failed: ", err);
}

inline void rasterize_forward_cpu(const RasterArgs& a) {
  on_cpu([&](const KernelTable& t, const HostPool* p) { return t.rasterize_forward_cpu(&a, p); });
}
inline void rasterize_backward_cpu(const RasterGradArgs& a, int num_chunks) {
  on_cpu([&](const KernelTable& t, const HostPool* p) { return t.rasterize_backward_cpu(&a, p, num_chunks); });
}
inline void interpolate_forward_cpu(const InterpArgs& a) {
  on_cpu([&](const KernelTable& t, const HostPool* p) { return t.interpolate_forward_cpu(&a, p); });
}
inline void interpolate_backward_cpu(const InterpArgs& a, int num_chunks, int64_t max_extra_bytes) {
  on_cpu([&](const KernelTable& t, const HostPool* p) {
    return t.interpolate_backward_cpu(&a, p, num_chunks, max_extra_bytes);
  });
}
inline void texture_forward_cpu(const TextureArgs& a) {
  on_cpu([&](const KernelTable& t, const HostPool* p) { return t.texture_forward_cpu(&a, p); });
}
inline void texture_backward_cpu(const TextureGradArgs& g, int num_threads) {
  on_cpu([&](const KernelTable& t, const HostPool* p) { return t.texture_backward_cpu(&g, p, num_threads); });
}
inline void mip_down_cpu(const float* src, int64_t B, int sh, int sw, int C, float* dst) {
  on_cpu([&](const KernelTable& t, const HostPool* p) { return t.mip_down_cpu(src, B, sh, sw, C, dst, p); });
}
inline void mip_down_adjoint_cpu(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad,
                                 bool accumulate) {
  on_cpu([&](const KernelTable& t, const HostPool* p) {
    return t.mip_down_adjoint_cpu(grad_next, B, sh, sw, C, grad, accumulate, p);
  });
}
inline void antialias_forward_cpu(const AntialiasArgs& a) {
  on_cpu([&](const KernelTable& t, const HostPool* p) { return t.antialias_forward_cpu(&a, p); });
}
inline void antialias_backward_cpu(const AntialiasArgs& a, int num_chunks) {
  on_cpu([&](const KernelTable& t, const HostPool* p) { return t.antialias_backward_cpu(&a, p, num_chunks); });
}

// The CUDA entries return the kernel library's message (nullptr on success), as run_on_device expects. Those
// that take scratch memory raise the allocator's own exception (torch.OutOfMemoryError) when it failed.
template <class Call>
const char* with_scratch(TensorWorkspace& ws, Call call) {
  const Workspace handle = ws.handle();
  const char* err = call(kernel_table(), &handle);
  ws.rethrow();
  return err;
}

inline const char* rasterize_forward_cuda(const RasterArgs& a, StreamHandle s, TensorWorkspace& ws) {
  return with_scratch(ws, [&](const KernelTable& t, const Workspace* w) { return t.rasterize_forward_cuda(&a, s, w); });
}
inline const char* rasterize_backward_cuda(const RasterGradArgs& a, StreamHandle s, TensorWorkspace& ws) {
  return with_scratch(ws,
                      [&](const KernelTable& t, const Workspace* w) { return t.rasterize_backward_cuda(&a, s, w); });
}
inline const char* interpolate_forward_cuda(const InterpArgs& a, StreamHandle s) {
  return kernel_table().interpolate_forward_cuda(&a, s);
}
inline const char* interpolate_backward_cuda(const InterpArgs& a, StreamHandle s, TensorWorkspace& ws) {
  return with_scratch(ws,
                      [&](const KernelTable& t, const Workspace* w) { return t.interpolate_backward_cuda(&a, s, w); });
}
inline const char* texture_forward_cuda(const TextureArgs& a, StreamHandle s) {
  return kernel_table().texture_forward_cuda(&a, s);
}
inline const char* texture_backward_cuda(const TextureGradArgs& g, StreamHandle s, TensorWorkspace& ws) {
  return with_scratch(ws, [&](const KernelTable& t, const Workspace* w) { return t.texture_backward_cuda(&g, s, w); });
}
inline const char* mip_down_cuda(const float* src, int64_t B, int sh, int sw, int C, float* dst, StreamHandle s) {
  return kernel_table().mip_down_cuda(src, B, sh, sw, C, dst, s);
}
inline const char* mip_down_adjoint_cuda(const float* grad_next, int64_t B, int sh, int sw, int C, float* grad,
                                         bool accumulate, StreamHandle s) {
  return kernel_table().mip_down_adjoint_cuda(grad_next, B, sh, sw, C, grad, accumulate, s);
}
inline const char* antialias_forward_cuda(const AntialiasArgs& a, StreamHandle s) {
  return kernel_table().antialias_forward_cuda(&a, s);
}
inline const char* antialias_backward_cuda(const AntialiasArgs& a, StreamHandle s, TensorWorkspace& ws) {
  return with_scratch(ws,
                      [&](const KernelTable& t, const Workspace* w) { return t.antialias_backward_cuda(&a, s, w); });
}
inline const char* upload_int32_cuda(const int32_t* values, int64_t n, int32_t* dst, StreamHandle s) {
  return kernel_table().upload_int32_cuda(values, n, dst, s);
}
inline const char* check_indices_cuda(const int32_t* tri, int64_t n, int64_t num_vertices, StreamHandle s) {
  return kernel_table().check_indices_cuda(tri, n, num_vertices, s);
}
inline const char* check_topology_table_cuda(const int32_t* table, int64_t n, int64_t bound, StreamHandle s) {
  return kernel_table().check_topology_table_cuda(table, n, bound, s);
}
inline const char* check_triangle_ids_cuda(const float* rast, int64_t num_pixels, int64_t num_triangles,
                                           StreamHandle s) {
  return kernel_table().check_triangle_ids_cuda(rast, num_pixels, num_triangles, s);
}

}  // namespace kernels
}  // namespace prerast
