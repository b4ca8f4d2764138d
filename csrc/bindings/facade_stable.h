// The tensor facade over torch's stable C ABI (STABLE_TORCH_LIBRARY, torch/csrc/stable): one binary for every
// torch from TORCH_TARGET_VERSION on. Nothing here imports an at:: or c10:: symbol; same names as
// facade_classic.h.
#pragma once

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#ifdef PRERAST_CUDA_LIBRARY
#include <torch/csrc/inductor/aoti_torch/c/shim.h>  // aoti_torch_get_current_cuda_stream (declared with USE_CUDA)
#endif

#if defined(_WIN32)
#if __has_include(<torch/headeronly/util/win32-headers.h>)
#include <torch/headeronly/util/win32-headers.h>  // <windows.h> as torch's stable headers include it
#else
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#endif
#elif defined(__linux__) || defined(__APPLE__)
#include <dlfcn.h>
#endif

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#define PRERAST_LIBRARY(m) STABLE_TORCH_LIBRARY(prerast, m)
#define PRERAST_LIBRARY_FRAGMENT(m) STABLE_TORCH_LIBRARY_FRAGMENT(prerast, m)
#define PRERAST_LIBRARY_IMPL(key, m) STABLE_TORCH_LIBRARY_IMPL(prerast, key, m)
#define PRERAST_KERNEL(fn) TORCH_BOX(&fn)

namespace prerast {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<torch::stable::Tensor>;
using TensorListArg = std::vector<torch::stable::Tensor>;
using IntListArg = std::vector<int64_t>;
using OptTensorListArg = std::optional<std::vector<torch::stable::Tensor>>;
using OptIntListArg = std::optional<std::vector<int64_t>>;
constexpr const char* kAbi = "stable";

namespace facade {

using torch::headeronly::ScalarType;

inline ScalarType native(Dtype d) {
  return d == Dtype::Float ? ScalarType::Float : d == Dtype::Int ? ScalarType::Int : ScalarType::Byte;
}

// Through the stable ABI, std::invalid_argument reaches Python as ValueError and std::out_of_range as
// IndexError. No standard exception becomes TypeError: the Python API checks dtypes itself, so that its
// callers still get TypeError; a raw op reports a wrong dtype as ValueError.
[[noreturn]] inline void raise_type(const std::string& m) { throw std::invalid_argument(m); }
[[noreturn]] inline void raise_value(const std::string& m) { throw std::invalid_argument(m); }
[[noreturn]] inline void raise_index(const std::string& m) { throw std::out_of_range(m); }
[[noreturn]] inline void raise_runtime(const std::string& m) { throw std::runtime_error(m); }
// The stable ABI has no way to raise c10::OutOfMemoryError (its type lives in libc10): the message carries
// kOutOfMemoryMarker instead, and prerast's Python functions raise torch.OutOfMemoryError for it (_ops.py).
constexpr const char* kOutOfMemoryMarker = "[prerast: out of memory]";
[[noreturn]] inline void raise_out_of_memory(const std::string& m) {
  throw std::runtime_error(m + " " + kOutOfMemoryMarker);
}
// An exception's message, without where the stable ABI's macros saw the failed shim call (" (originally from ...").
// Before torch 2.13 a failed shim call carries no message of torch's, only that place.
inline std::string message_of(const std::exception& e) {
  const std::string what = e.what();
  if (what.find(" API call failed at ") != std::string::npos && what.find(" (originally from ") == std::string::npos)
    return "torch gave no reason: torch before 2.13 keeps it to itself";
  return what.substr(0, what.find(" (originally from "));
}

inline bool has_dtype(const Tensor& t, Dtype d) { return t.scalar_type() == native(d); }
inline std::string dtype_name(const Tensor& t) { return torch::headeronly::toString(t.scalar_type()); }
inline std::string dtype_name(Dtype d) { return torch::headeronly::toString(native(d)); }
inline std::string device_name(const Tensor& t) {
  return t.is_cpu() ? "cpu" : (t.is_cuda() ? "cuda:" : "device:") + std::to_string(t.get_device_index());
}
inline bool same_device(const Tensor& a, const Tensor& b) {
  return a.is_cpu() == b.is_cpu() && a.is_cuda() == b.is_cuda() && a.get_device_index() == b.get_device_index();
}
inline std::vector<int64_t> sizes(const Tensor& t) {
  auto s = t.sizes();
  return std::vector<int64_t>(s.begin(), s.end());
}

template <class T>
T* data(const Tensor& t) {
  return t.mutable_data_ptr<T>();
}

inline Tensor new_empty(const Tensor& like, const std::vector<int64_t>& shape, Dtype d) {
  return torch::stable::new_empty(like, shape, native(d));
}
inline Tensor new_zeros(const Tensor& like, const std::vector<int64_t>& shape, Dtype d) {
  return torch::stable::new_zeros(like, shape, native(d));
}

// A CPU tensor over `data`, a block of prerast's output cache (output_cache.h): release(data, context) gives it
// back once the tensor's storage dies, on whichever thread drops the last reference. Its storage cannot grow (a
// resize_ past its size raises). Only where the running torch has torch_from_blob (2.11 on): can_wrap_blob().
using BlobRelease = void (*)(void* data, void* context);
using FromBlob = AOTITorchError (*)(void*, int64_t, const int64_t*, const int64_t*, int64_t, int32_t, int32_t, int32_t,
                                    AtenTensorHandle*, int32_t, const uint8_t*, int64_t, BlobRelease, void*);

// The running torch's torch_from_blob, or null. This library targets torch 2.10, whose header hides the shim and
// whose libtorch_cpu lacks it, so it is looked up at run time, as torch's own headers reach newer shims
// (torch::stable::detail::lookup_stable_symbol, whose dlsym the binding imports already): the binding loads under
// 2.10, and the symbol audit (ci/repair/symbols.py) sees no shim newer than 2.10. Windows: torch_cpu.dll, which the
// process has loaded. macOS: the library that serves this binding's shims (dladdr of one), already loaded
// (RTLD_NOLOAD). Linux (glibc): RTLD_DEFAULT, which searches the calling library's scope, libtorch_cpu (a
// dependency of it) included. Elsewhere: none, and outputs are allocated plainly.
inline FromBlob find_from_blob() {
#if defined(_WIN32)
  HMODULE torch_cpu = GetModuleHandleW(L"torch_cpu.dll");
  return torch_cpu ? reinterpret_cast<FromBlob>(GetProcAddress(torch_cpu, "torch_from_blob")) : nullptr;
#elif defined(__APPLE__)
  Dl_info shims;
  if (!dladdr(reinterpret_cast<void*>(&aoti_torch_create_tensor_from_blob_v2), &shims) || !shims.dli_fname)
    return nullptr;
  void* torch_cpu = dlopen(shims.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!torch_cpu) return nullptr;
  auto found = reinterpret_cast<FromBlob>(dlsym(torch_cpu, "torch_from_blob"));
  dlclose(torch_cpu);  // balances RTLD_NOLOAD's reference; torch stays loaded
  return found;
#elif defined(__linux__)
  return reinterpret_cast<FromBlob>(dlsym(RTLD_DEFAULT, "torch_from_blob"));
#else
  return nullptr;
#endif
}
inline FromBlob from_blob_shim() {
  static const FromBlob found = find_from_blob();
  return found;
}
inline bool can_wrap_blob() { return from_blob_shim() != nullptr; }

inline Tensor wrap_blob(void* data, const std::vector<int64_t>& shape, Dtype d, BlobRelease release, void* context) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) strides[i] = stride, stride *= shape[i];
  using torch::stable::detail::from;
  using torch::stable::detail::to;
  AtenTensorHandle handle;
  STABLE_TORCH_ERROR_CODE_CHECK(
      from_blob_shim()(data, (int64_t)shape.size(), shape.data(), strides.data(), 0, to<int32_t>(from(native(d))),
                       to<int32_t>(from(torch::headeronly::DeviceType::CPU)), -1, &handle,
                       to<int32_t>(from(torch::headeronly::Layout::Strided)), nullptr, 0, release, context));
  return Tensor(handle);
}

inline Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Tensor self = t;  // torch::stable::narrow takes a non-const reference; the result is a view either way
  return torch::stable::narrow(self, dim, start, length);
}
inline Tensor view(const Tensor& t, const std::vector<int64_t>& shape) { return torch::stable::view(t, shape); }
inline Tensor select(const Tensor& t, int64_t dim, int64_t index) { return torch::stable::select(t, dim, index); }
inline Tensor clone(const Tensor& t) { return torch::stable::clone(t); }

inline void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  torch::stable::parallel_for(0, n, grain, fn);
}
inline int num_threads() { return (int)torch::stable::get_num_threads(); }

#ifdef PRERAST_CUDA_LIBRARY
template <class Fn>
auto on_cuda_stream(const Tensor& t, Fn fn) {
  const torch::stable::accelerator::DeviceGuard guard(t.get_device_index());
  void* stream = nullptr;
  if (aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream) != AOTI_TORCH_SUCCESS)
    raise_runtime("could not get the current CUDA stream");
  return fn(stream);
}
#endif

}  // namespace facade
}  // namespace prerast
