// The tensor facade over classic ATen (TORCH_LIBRARY): for torch releases older than the stable ABI's floor, and
// for the per-release build selected with PRERAST_ABI=classic. Same names as facade_stable.h.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#ifdef PRERAST_CUDA_LIBRARY
#include <c10/core/DeviceGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <string>
#include <vector>

#define PRERAST_LIBRARY(m) TORCH_LIBRARY(prerast, m)
#define PRERAST_LIBRARY_FRAGMENT(m) TORCH_LIBRARY_FRAGMENT(prerast, m)
#define PRERAST_LIBRARY_IMPL(key, m) TORCH_LIBRARY_IMPL(prerast, key, m)
#define PRERAST_KERNEL(fn) (&fn)

namespace prerast {

using Tensor = at::Tensor;
using OptTensor = c10::optional<at::Tensor>;
using TensorListArg = at::TensorList;                    // a Tensor[] argument
using IntListArg = at::IntArrayRef;                      // an int[] argument
using OptTensorListArg = c10::optional<at::TensorList>;  // a Tensor[]? argument
using OptIntListArg = c10::optional<at::IntArrayRef>;    // an int[]? argument
constexpr const char* kAbi = "classic";

namespace facade {

inline at::ScalarType native(Dtype d) {
  return d == Dtype::Float ? at::kFloat : d == Dtype::Int ? at::kInt : at::kByte;
}

// torch's exception classes keep Python's exception types: TypeError, ValueError, IndexError.
[[noreturn]] inline void raise_type(const std::string& m) { C10_THROW_ERROR(TypeError, m); }
[[noreturn]] inline void raise_value(const std::string& m) { C10_THROW_ERROR(ValueError, m); }
[[noreturn]] inline void raise_index(const std::string& m) { C10_THROW_ERROR(IndexError, m); }
[[noreturn]] inline void raise_runtime(const std::string& m) { C10_THROW_ERROR(Error, m); }
[[noreturn]] inline void raise_out_of_memory(const std::string& m) { C10_THROW_ERROR(OutOfMemoryError, m); }
// An exception's message, without the C++ backtrace that a c10::Error's what() may carry.
inline std::string message_of(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return c10_error ? c10_error->what_without_backtrace() : e.what();
}

inline bool has_dtype(const Tensor& t, Dtype d) { return t.scalar_type() == native(d); }
inline std::string dtype_name(const Tensor& t) { return c10::toString(t.scalar_type()); }
inline std::string dtype_name(Dtype d) { return c10::toString(native(d)); }
inline std::string device_name(const Tensor& t) { return t.device().str(); }
inline bool same_device(const Tensor& a, const Tensor& b) { return a.device() == b.device(); }
inline std::vector<int64_t> sizes(const Tensor& t) { return t.sizes().vec(); }

template <class T>
T* data(const Tensor& t) {
  return t.data_ptr<T>();
}

inline Tensor new_empty(const Tensor& like, const std::vector<int64_t>& shape, Dtype d) {
  return at::empty(shape, like.options().dtype(native(d)));
}
inline Tensor new_zeros(const Tensor& like, const std::vector<int64_t>& shape, Dtype d) {
  return at::zeros(shape, like.options().dtype(native(d)));
}
// A CPU tensor over `data`, a block of prerast's output cache (output_cache.h): release(data, context) gives it
// back once the tensor's storage dies, on whichever thread drops the last reference. Its storage cannot grow (a
// resize_ past its size raises). Every classic torch has it.
using BlobRelease = void (*)(void* data, void* context);
inline bool can_wrap_blob() { return true; }
inline Tensor wrap_blob(void* data, const std::vector<int64_t>& shape, Dtype d, BlobRelease release, void* context) {
  return at::from_blob(
      data, shape, [release, context](void* p) { release(p, context); },
      at::TensorOptions().dtype(native(d)).device(at::kCPU));
}

inline Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  return t.narrow(dim, start, length);
}
inline Tensor view(const Tensor& t, const std::vector<int64_t>& shape) { return t.view(shape); }
inline Tensor select(const Tensor& t, int64_t dim, int64_t index) { return t.select(dim, index); }
inline Tensor clone(const Tensor& t) { return t.clone(); }

inline void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  at::parallel_for(0, n, grain, fn);
}
inline int num_threads() { return at::get_num_threads(); }

#ifdef PRERAST_CUDA_LIBRARY
// Runs fn(stream) under a device guard for t's device, on that device's current stream. c10's generic guard, not
// CUDAGuard, whose inline methods call the CUDA runtime: this part links no libcudart, so that it serves a torch
// of any CUDA major (the kernel library of that major does the CUDA calls).
template <class Fn>
auto on_cuda_stream(const Tensor& t, Fn fn) {
  const c10::DeviceGuard guard(t.device());
  return fn((void*)c10::cuda::getCurrentCUDAStream(t.device().index()).stream());
}
#endif

}  // namespace facade
}  // namespace prerast
