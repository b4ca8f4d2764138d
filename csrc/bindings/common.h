// Helpers shared by the op bindings: argument checks that name the op, the argument, what was expected and
// what arrived; the host thread pool and the CUDA workspace handed to the torch-free core.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "../core/common.h"

#ifdef PRERAST_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace prerast {

inline std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// dtype, contiguity and rank of a tensor argument.
inline void check_tensor(const char* op, const char* name, const at::Tensor& t, at::ScalarType dtype,
                         std::initializer_list<int64_t> ranks) {
  TORCH_CHECK_TYPE(t.scalar_type() == dtype, op, ": ", name, " must be ", c10::toString(dtype), ", got ",
                   c10::toString(t.scalar_type()));
  bool rank_ok = false;
  std::string want;
  for (int64_t r : ranks) rank_ok |= t.dim() == r, want += (want.empty() ? "" : " or ") + std::to_string(r);
  TORCH_CHECK_VALUE(rank_ok, op, ": ", name, " must have ", want, " dimensions, got shape ", shape_str(t));
  TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", name, " must be contiguous (call .contiguous() on it)");
}

inline void check_same_device(const char* op, const char* name, const at::Tensor& t, const at::Tensor& ref,
                              const char* ref_name) {
  TORCH_CHECK_VALUE(t.device() == ref.device(), op, ": ", name, " is on ", t.device(), " but ", ref_name, " is on ",
                    ref.device(), "; move them to one device");
}

inline void check_dim(const char* op, const char* name, const at::Tensor& t, int64_t d, int64_t want) {
  TORCH_CHECK_VALUE(t.size(d) == want, op, ": ", name, " must have size ", want, " in dimension ", d, ", got shape ",
                    shape_str(t));
}

// Triangle indices must lie in [0, num_vertices): checked before any kernel reads through them. `source` names
// the tensor whose vertices they index.
inline void check_indices(const char* op, const at::Tensor& tri, int64_t num_vertices, const char* source = "pos") {
  if (tri.numel() == 0) return;
  auto mm = at::aminmax(tri);
  int64_t lo = std::get<0>(mm).item<int64_t>(), hi = std::get<1>(mm).item<int64_t>();
  TORCH_CHECK_INDEX(lo >= 0 && hi < num_vertices, op, ": tri holds vertex indices in [", lo, ", ", hi,
                    "] but ", source, " has ", num_vertices, " vertices");
}

inline ParallelFor torch_parallel_for() {
  return [](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    at::parallel_for(0, n, grain, fn);
  };
}

// CUDA scratch memory from torch's caching allocator, released when the op returns.
struct TensorWorkspace {
  at::TensorOptions opts;
  std::vector<at::Tensor> held;
  Workspace handle() {
    Workspace w;
    w.self = this;
    w.alloc = [](void* self, size_t bytes) -> void* {
      auto* me = static_cast<TensorWorkspace*>(self);
      me->held.push_back(at::empty({(int64_t)bytes + 16}, me->opts.dtype(at::kByte)));
      return me->held.back().data_ptr();
    };
    return w;
  }
};

// Runs cpu() on the CPU, or cuda(stream) under a guard for ref's device on its current stream; cuda returns
// nullptr or a CUDA error message.
template <class Cpu, class Cuda>
void run_on_device(const char* op, const at::Tensor& ref, Cpu cpu, Cuda cuda) {
  if (ref.is_cpu()) {
    cpu();
    return;
  }
#ifdef PRERAST_WITH_CUDA
  const c10::cuda::CUDAGuard guard(ref.device());
  const char* err = cuda((StreamHandle)c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == nullptr, op, ": CUDA error: ", err);
#else
  (void)cuda;
  TORCH_CHECK(false, op, ": this prerast binary was built without CUDA");
#endif
}

}  // namespace prerast
