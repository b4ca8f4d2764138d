// The bindings' side of the kernel library's C interface (core/kernel_table.h): the table the loader attached to
// this library (prerast_attach_kernels, library.cpp), and calls of its entries by name:
//
//     kernels::cpu("rasterize_forward_cpu", args);                   // raises what failed
//     return kernels::cuda("rasterize_forward_cuda", args, stream, ws);   // the message, for run_on_device
//
// Torch's exceptions stay on this side: the thread pool and the scratch allocator handed to the kernel library
// catch them and report a failure across the boundary, and the call raises their message again here. A failure
// of kind kKernelOutOfMemory, or a scratch allocation that failed, raises out of memory (torch.OutOfMemoryError).
#pragma once

#include <string>

#include "../core/kernel_table.h"

namespace prerast {

// The kernel library this binding library calls: the CPU part holds the CPU kernels' table, the CUDA part that of
// the CUDA major the loader chose. Set once at load, before any op runs.
inline const KernelTable*& attached_kernels() {
  static const KernelTable* table = nullptr;
  return table;
}

// Why `t` cannot serve this binding library (its CUDA part when `cuda`), or nullptr.
inline const char* kernel_table_problem(const KernelTable* t, bool cuda) {
  if (t == nullptr) return "the kernel library gave no table";
  if (t->interface_version != kKernelInterface || t->size != sizeof(KernelTable) || t->find == nullptr)
    return "the kernel library's interface version differs from this binding's (parts of two prerast builds?)";
  const bool is_cuda = t->compute != nullptr && std::string(t->compute).rfind("cuda", 0) == 0;
  if (cuda != is_cuda)
    return cuda ? "the binding's CUDA part was handed a kernel library without CUDA kernels"
                : "the binding's CPU part was handed a kernel library without CPU kernels";
  return nullptr;
}

// torch's intra-op thread pool as the kernel library's HostPool. An exception of torch's is kept for rethrow().
class TorchPool {
 public:
  TorchPool() {
    pool_.run = &run;
    pool_.self = this;
  }
  const HostPool* get() const { return &pool_; }
  void rethrow(const char* name) const { error_.rethrow(name); }

 private:
  static void run(void* self, int64_t n, int64_t grain, RangeBody body, void* ctx) {
    auto* me = static_cast<TorchPool*>(self);
    try {
      facade::parallel_for(n, grain, [body, ctx](int64_t begin, int64_t end) { body(ctx, begin, end); });
    } catch (...) {
      me->error_.catch_current();
    }
  }
  HostPool pool_;
  CaughtError error_;
};

namespace kernels {

inline KernelEntry entry(const char* name) {
  const KernelTable* t = attached_kernels();
  PR_CHECK(t != nullptr, "prerast's kernel library is not attached to its binding (python -m prerast doctor says why)");
  KernelEntry e = t->find(name);
  PR_CHECK(e != nullptr, "prerast's kernel library (", t->compute, ") has no entry ", name,
           " (a kernel library of another prerast build?)");
  return e;
}

// Raises an out-of-memory failure of entry `name`; returns any other failure's message.
inline const char* raise_out_of_memory(const char* name, const char* err, KernelFailure kind) {
  if (err != nullptr && kind == kKernelOutOfMemory) facade::raise_out_of_memory(str(name, ": out of memory: ", err));
  return err;
}

// Runs the CPU entry `name` on torch's thread pool; raises what failed.
template <class Args>
void cpu(const char* name, const Args& args) {
  KernelEntry e = entry(name);
  TorchPool pool;
  KernelFailure kind = kKernelError;
  KernelContext context{pool.get(), facade::num_threads(), nullptr, nullptr, &kind};
  const char* err = e(&args, &context);
  pool.rethrow(name);
  raise_out_of_memory(name, err, kind);
  PR_CHECK(err == nullptr, name, ": ", err);
}

// Queues the CUDA entry `name` on stream; returns the kernel library's message (nullptr on success), as
// run_on_device expects; memory that could not be had (scratch memory, or the library's own) raises out of memory.
template <class Args>
const char* cuda(const char* name, const Args& args, StreamHandle stream) {
  KernelFailure kind = kKernelError;
  KernelContext context{nullptr, 0, stream, nullptr, &kind};
  return raise_out_of_memory(name, entry(name)(&args, &context), kind);
}
template <class Args>
const char* cuda(const char* name, const Args& args, StreamHandle stream, TensorWorkspace& ws) {
  const Workspace handle = ws.handle();
  KernelFailure kind = kKernelError;
  KernelContext context{nullptr, 0, stream, &handle, &kind};
  const char* err = entry(name)(&args, &context);
  ws.rethrow();
  return raise_out_of_memory(name, err, kind);
}

}  // namespace kernels
}  // namespace prerast
