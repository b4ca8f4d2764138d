// The kernel library's side of kernel_table.h: entry points registered by name, next to the kernels they run.
//
//     PRERAST_CPU_ENTRY(scale_cpu, ScaleArgs, a, k) { scale_cpu(a, k.pfor); }
//     PRERAST_CUDA_ENTRY(scale_cuda, ScaleArgs, a, k) { return scale_cuda(a, k.stream); }
//
// define an entry `name` taking `Args` (a plain struct of the op's header): its body sees the arguments as `a` and
// the call's scope as `k` (CpuScope: pfor, num_threads; CudaScope: stream, workspace). The body's exceptions become
// the entry's message, std::bad_alloc (and a refused scratch allocation) of kind kKernelOutOfMemory; a thread of the
// binding's pool runs it with exceptions caught the same way.
#pragma once

#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include "kernel_table.h"

namespace prerast {

// Every entry of this library, by name (filled as the library loads).
inline std::map<std::string, KernelEntry>& kernel_registry() {
  static std::map<std::string, KernelEntry> entries;
  return entries;
}

struct EntryRegistration {
  EntryRegistration(const char* name, KernelEntry entry) { kernel_registry()[name] = entry; }
};

inline KernelEntry find_kernel_entry(const char* name) {
  auto it = kernel_registry().find(name ? name : "");
  return it == kernel_registry().end() ? nullptr : it->second;
}

// The message of a failed call, kept per thread until that thread's next failure; its kind goes to the context.
inline const char* kernel_failure(const std::string& what, KernelFailure kind, const KernelContext* context) {
  thread_local std::string message;
  message = what;
  if (context->failure != nullptr) *context->failure = kind;
  return message.c_str();
}

// The kind of the exception being handled: out of memory for std::bad_alloc (ScratchFailed is one).
inline KernelFailure current_failure_kind() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return kKernelOutOfMemory;
  } catch (...) {
    return kKernelError;
  }
}

// The core's ParallelFor over the binding's pool. A body that throws on a pool thread records its message (the
// first one wins) and returns: no exception travels through the binding's frames.
struct CpuScope {
  ParallelFor pfor;
  int num_threads;
};

class PoolErrors {
 public:
  void record(const char* what, KernelFailure kind) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.empty()) error_ = what, kind_ = kind;
  }
  const std::string& error() const { return error_; }
  KernelFailure kind() const { return kind_; }

 private:
  std::mutex mutex_;
  std::string error_;
  KernelFailure kind_ = kKernelError;
};

inline ParallelFor pool_parallel_for(const HostPool* pool, PoolErrors& errors) {
  return [pool, &errors](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    struct Call {
      PoolErrors* errors;
      const std::function<void(int64_t, int64_t)>* fn;
    } call{&errors, &fn};
    pool->run(
        pool->self, n, grain,
        [](void* ctx, int64_t begin, int64_t end) {
          auto* c = static_cast<Call*>(ctx);
          try {
            (*c->fn)(begin, end);
          } catch (const std::exception& e) {
            c->errors->record(e.what(), current_failure_kind());
          } catch (...) {
            c->errors->record("unknown exception", kKernelError);
          }
        },
        &call);
  };
}

template <class Args, void (*Body)(const Args&, const CpuScope&)>
const char* cpu_entry(const void* args, const KernelContext* context) {
  PoolErrors errors;
  try {
    Body(*static_cast<const Args*>(args), CpuScope{pool_parallel_for(context->pool, errors), context->num_threads});
  } catch (const std::exception& e) {
    errors.record(e.what(), current_failure_kind());
  } catch (...) {
    errors.record("unknown exception", kKernelError);
  }
  return errors.error().empty() ? nullptr : kernel_failure(errors.error(), errors.kind(), context);
}

// The CUDA call's scope: the stream and the binding's scratch memory, whose failed allocation (null) becomes an
// exception of this library, caught before the entry returns.
struct ScratchFailed : std::bad_alloc {
  const char* what() const noexcept override { return "could not allocate CUDA scratch memory"; }
};

struct CudaScope {
  StreamHandle stream;
  Workspace workspace;
};

inline Workspace checked_workspace(const Workspace* outer) {
  Workspace w;
  w.self = const_cast<Workspace*>(outer);
  w.alloc = [](void* self, size_t bytes) -> void* {
    auto* ws = static_cast<Workspace*>(self);
    void* p = ws != nullptr && ws->alloc != nullptr ? ws->get(bytes) : nullptr;
    if (p == nullptr) throw ScratchFailed();
    return p;
  };
  return w;
}

template <class Args, const char* (*Body)(const Args&, const CudaScope&)>
const char* cuda_entry(const void* args, const KernelContext* context) {
  try {
    const char* err =
        Body(*static_cast<const Args*>(args), CudaScope{context->stream, checked_workspace(context->workspace)});
    return err ? kernel_failure(err, kKernelError, context) : nullptr;
  } catch (const std::exception& e) {
    return kernel_failure(e.what(), current_failure_kind(), context);
  } catch (...) {
    return kernel_failure("unknown exception", kKernelError, context);
  }
}

// The table of this library (kernel_table_cpu.cpp, kernel_table_cuda.cu).
inline const KernelTable* make_kernel_table(const char* compute) {
  static KernelTable table{};
  table.interface_version = kKernelInterface;
  table.size = sizeof(KernelTable);
  table.compute = compute;
  table.find = [](const char* name) { return find_kernel_entry(name); };
  return &table;
}

}  // namespace prerast

#define PRERAST_ENTRY_(kind, Ret, Scope, name, Args, a, k)                \
  static Ret name##_entry_body(const Args& a, const ::prerast::Scope& k); \
  static const ::prerast::EntryRegistration name##_entry_registration(    \
      #name, &::prerast::kind##_entry<Args, &name##_entry_body>);         \
  static Ret name##_entry_body(const Args& a, const ::prerast::Scope& k)
#define PRERAST_CPU_ENTRY(name, Args, a, k) PRERAST_ENTRY_(cpu, void, CpuScope, name, Args, a, k)
#define PRERAST_CUDA_ENTRY(name, Args, a, k) PRERAST_ENTRY_(cuda, const char*, CudaScope, name, Args, a, k)
