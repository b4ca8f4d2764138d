// The CUDA kernel library's C table (kernel_table.h), one build per CUDA major. The binding's scratch allocator
// reports a failure by returning null (it keeps torch's exception for itself); here that becomes an exception of
// this library, caught before the entry returns, so that no exception crosses into or out of the binding.
#include <cuda_runtime.h>

#include <exception>
#include <string>

#include "kernel_table.h"
#include "upload.h"
#include "validate.h"

namespace prerast {
namespace {

struct ScratchFailed : std::exception {
  const char* what() const noexcept override { return "could not allocate CUDA scratch memory"; }
};

const char* failure(const char* what) {
  thread_local std::string message;
  message = what;
  return message.c_str();
}

// The binding's workspace, with a null allocation turned into ScratchFailed.
Workspace checked(const Workspace* outer) {
  Workspace w;
  w.self = const_cast<Workspace*>(outer);
  w.alloc = [](void* self, size_t bytes) -> void* {
    void* p = static_cast<Workspace*>(self)->get(bytes);
    if (p == nullptr) throw ScratchFailed();
    return p;
  };
  return w;
}

template <class Body>
const char* guarded(Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return failure(e.what());
  } catch (...) {
    return failure("unknown exception");
  }
}

// "cuda 12.4": the toolkit this library was compiled with (CUDART_VERSION is major * 1000 + minor * 10).
const char* compute_name() {
  static const std::string name =
      "cuda " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
  return name.c_str();
}

KernelTable make_table() {
  KernelTable t{};
  t.interface_version = kKernelInterface;
  t.size = sizeof(KernelTable);
  t.compute = compute_name();
  t.rasterize_forward_cuda = [](const RasterArgs* a, StreamHandle s, const Workspace* ws) {
    return guarded([&] { return rasterize_forward_cuda(*a, s, checked(ws)); });
  };
  t.rasterize_backward_cuda = [](const RasterGradArgs* a, StreamHandle s, const Workspace* ws) {
    return guarded([&] { return rasterize_backward_cuda(*a, s, checked(ws)); });
  };
  t.interpolate_forward_cuda = [](const InterpArgs* a, StreamHandle s) {
    return guarded([&] { return interpolate_forward_cuda(*a, s); });
  };
  t.interpolate_backward_cuda = [](const InterpArgs* a, StreamHandle s, const Workspace* ws) {
    return guarded([&] { return interpolate_backward_cuda(*a, s, checked(ws)); });
  };
  t.texture_forward_cuda = [](const TextureArgs* a, StreamHandle s) {
    return guarded([&] { return texture_forward_cuda(*a, s); });
  };
  t.texture_backward_cuda = [](const TextureGradArgs* g, StreamHandle s, const Workspace* ws) {
    return guarded([&] { return texture_backward_cuda(*g, s, checked(ws)); });
  };
  t.mip_down_cuda = [](const float* src, int64_t B, int sh, int sw, int C, float* dst, StreamHandle s) {
    return guarded([&] { return mip_down_cuda(src, B, sh, sw, C, dst, s); });
  };
  t.mip_down_adjoint_cuda = [](const float* grad_next, int64_t B, int sh, int sw, int C, float* grad, bool accumulate,
                               StreamHandle s) {
    return guarded([&] { return mip_down_adjoint_cuda(grad_next, B, sh, sw, C, grad, accumulate, s); });
  };
  t.antialias_forward_cuda = [](const AntialiasArgs* a, StreamHandle s) {
    return guarded([&] { return antialias_forward_cuda(*a, s); });
  };
  t.antialias_backward_cuda = [](const AntialiasArgs* a, StreamHandle s, const Workspace* ws) {
    return guarded([&] { return antialias_backward_cuda(*a, s, checked(ws)); });
  };
  t.upload_int32_cuda = [](const int32_t* values, int64_t n, int32_t* dst, StreamHandle s) {
    return guarded([&] { return upload_int32_cuda(values, n, dst, s); });
  };
  t.check_indices_cuda = [](const int32_t* tri, int64_t n, int64_t num_vertices, StreamHandle s) {
    return guarded([&] { return check_indices_cuda(tri, n, num_vertices, s); });
  };
  t.check_topology_table_cuda = [](const int32_t* table, int64_t n, int64_t bound, StreamHandle s) {
    return guarded([&] { return check_topology_table_cuda(table, n, bound, s); });
  };
  t.check_triangle_ids_cuda = [](const float* rast, int64_t num_pixels, int64_t num_triangles, StreamHandle s) {
    return guarded([&] { return check_triangle_ids_cuda(rast, num_pixels, num_triangles, s); });
  };
  return t;
}

}  // namespace

extern "C" PRERAST_EXPORT const KernelTable* prerast_kernel_table(void) {
  static const KernelTable table = make_table();
  return &table;
}

}  // namespace prerast
