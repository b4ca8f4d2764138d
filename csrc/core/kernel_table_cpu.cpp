// The CPU kernel library's C table (kernel_table.h): each entry runs the core on the binding's thread pool and
// turns whatever the core throws (std::bad_alloc above all) into the message it returns.
#include <exception>
#include <mutex>
#include <string>

#include "kernel_table.h"

namespace prerast {
namespace {

// The message of a failed call, kept per thread until that thread's next failure.
const char* failure(const char* what) {
  thread_local std::string message;
  message = what;
  return message.c_str();
}

// The core's ParallelFor over the binding's pool. A body that throws on a pool thread records its message (the
// first one wins) and returns: no exception travels through the binding's frames.
struct PoolFor {
  const HostPool* pool;
  std::mutex mutex;
  std::string error;

  void record(const char* what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (error.empty()) error = what;
  }

  ParallelFor parallel_for() {
    return [this](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
      struct Call {
        PoolFor* self;
        const std::function<void(int64_t, int64_t)>* fn;
      } call{this, &fn};
      pool->run(
          pool->self, n, grain,
          [](void* ctx, int64_t begin, int64_t end) {
            auto* c = static_cast<Call*>(ctx);
            try {
              (*c->fn)(begin, end);
            } catch (const std::exception& e) {
              c->self->record(e.what());
            } catch (...) {
              c->self->record("unknown exception");
            }
          },
          &call);
    };
  }
};

// Runs body(parallel_for) and returns nullptr, or the message of what failed on any thread.
template <class Body>
const char* guarded(const HostPool* pool, Body body) {
  PoolFor pf{pool, {}, {}};
  try {
    body(pf.parallel_for());
  } catch (const std::exception& e) {
    pf.record(e.what());
  } catch (...) {
    pf.record("unknown exception");
  }
  return pf.error.empty() ? nullptr : failure(pf.error.c_str());
}

KernelTable make_table() {
  KernelTable t{};
  t.interface_version = kKernelInterface;
  t.size = sizeof(KernelTable);
  t.compute = "cpu";
  t.rasterize_forward_cpu = [](const RasterArgs* a, const HostPool* p) {
    return guarded(p, [&](const ParallelFor& pfor) { rasterize_forward_cpu(*a, pfor); });
  };
  t.rasterize_backward_cpu = [](const RasterGradArgs* a, const HostPool* p, int num_chunks) {
    return guarded(p, [&](const ParallelFor& pfor) { rasterize_backward_cpu(*a, pfor, num_chunks); });
  };
  t.interpolate_forward_cpu = [](const InterpArgs* a, const HostPool* p) {
    return guarded(p, [&](const ParallelFor& pfor) { interpolate_forward_cpu(*a, pfor); });
  };
  t.interpolate_backward_cpu = [](const InterpArgs* a, const HostPool* p, int num_chunks, int64_t max_extra_bytes) {
    return guarded(p,
                   [&](const ParallelFor& pfor) { interpolate_backward_cpu(*a, pfor, num_chunks, max_extra_bytes); });
  };
  t.texture_forward_cpu = [](const TextureArgs* a, const HostPool* p) {
    return guarded(p, [&](const ParallelFor& pfor) { texture_forward_cpu(*a, pfor); });
  };
  t.texture_backward_cpu = [](const TextureGradArgs* g, const HostPool* p, int num_threads) {
    return guarded(p, [&](const ParallelFor& pfor) { texture_backward_cpu(*g, pfor, num_threads); });
  };
  t.mip_down_cpu = [](const float* src, int64_t B, int sh, int sw, int C, float* dst, const HostPool* p) {
    return guarded(p, [&](const ParallelFor& pfor) { mip_down_cpu(src, B, sh, sw, C, dst, pfor); });
  };
  t.mip_down_adjoint_cpu = [](const float* grad_next, int64_t B, int sh, int sw, int C, float* grad, bool accumulate,
                              const HostPool* p) {
    return guarded(
        p, [&](const ParallelFor& pfor) { mip_down_adjoint_cpu(grad_next, B, sh, sw, C, grad, accumulate, pfor); });
  };
  t.antialias_forward_cpu = [](const AntialiasArgs* a, const HostPool* p) {
    return guarded(p, [&](const ParallelFor& pfor) { antialias_forward_cpu(*a, pfor); });
  };
  t.antialias_backward_cpu = [](const AntialiasArgs* a, const HostPool* p, int num_chunks) {
    return guarded(p, [&](const ParallelFor& pfor) { antialias_backward_cpu(*a, pfor, num_chunks); });
  };
  return t;
}

}  // namespace

extern "C" PRERAST_EXPORT const KernelTable* prerast_kernel_table(void) {
  static const KernelTable table = make_table();
  return &table;
}

}  // namespace prerast
