// Helpers shared by the op bindings, written once over the tensor facade: argument checks that name the op, the
// argument, what was expected and what arrived; the host thread pool, the CUDA workspace and the dispatch to
// the torch-free core.
//
// The facade is chosen at compile time: torch's stable C ABI (PRERAST_STABLE_ABI: one binary for every torch
// from the target release on) or classic ATen (one binary per torch release). Each op's binding is written once
// against it. A library is built either with the CPU kernels and the op schemas, or (PRERAST_CUDA_LIBRARY) with
// the CUDA kernels only, so that the CUDA kernels load only into a CUDA build of torch.
#pragma once

namespace prerast {
// The element types the bindings allocate and check; each facade maps them to its own scalar types.
enum class Dtype { Float, Int, Byte };
}  // namespace prerast

#ifdef PRERAST_STABLE_ABI
#include "facade_stable.h"
#else
#include "facade_classic.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/common.h"
#include "../core/host_pages.h"
#ifndef PRERAST_CUDA_LIBRARY
#include "output_cache.h"
#endif

namespace prerast {

using facade::data;
using facade::same_device;
using facade::sizes;

template <class... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
inline std::string shape_str(const Tensor& t) { return shape_str(sizes(t)); }
inline bool has_shape(const Tensor& t, const std::vector<int64_t>& shape) { return sizes(t) == shape; }

// An optional list argument (int[]?, Tensor[]?) as a list, None as the empty one. The list arguments are optional
// because AOTInductor's proxy executor passes an empty list to an op as None.
template <class OptList>
auto list_or_empty(const OptList& list) -> std::decay_t<decltype(*list)> {
  return list.has_value() ? *list : std::decay_t<decltype(*list)>();
}

}  // namespace prerast

// Checks that raise the Python exception type their name says (TypeError, ValueError, IndexError) or
// RuntimeError, with the message built from the remaining arguments.
#define PR_CHECK_WITH(raise, cond, ...)                                 \
  do {                                                                  \
    if (!(cond)) ::prerast::facade::raise(::prerast::str(__VA_ARGS__)); \
  } while (0)
#define PR_CHECK_TYPE(cond, ...) PR_CHECK_WITH(raise_type, cond, __VA_ARGS__)
#define PR_CHECK_VALUE(cond, ...) PR_CHECK_WITH(raise_value, cond, __VA_ARGS__)
#define PR_CHECK_INDEX(cond, ...) PR_CHECK_WITH(raise_index, cond, __VA_ARGS__)
#define PR_CHECK(cond, ...) PR_CHECK_WITH(raise_runtime, cond, __VA_ARGS__)

namespace prerast {

// dtype, contiguity and rank of a tensor argument.
inline void check_tensor(const char* op, const char* name, const Tensor& t, Dtype dtype,
                         std::initializer_list<int64_t> ranks) {
  PR_CHECK_TYPE(facade::has_dtype(t, dtype), op, ": ", name, " must be ", facade::dtype_name(dtype), ", got ",
                facade::dtype_name(t));
  bool rank_ok = false;
  std::string want;
  for (int64_t r : ranks) rank_ok |= t.dim() == r, want += (want.empty() ? "" : " or ") + std::to_string(r);
  PR_CHECK_VALUE(rank_ok, op, ": ", name, " must have ", want, " dimensions, got shape ", shape_str(t));
  PR_CHECK_VALUE(t.is_contiguous(), op, ": ", name, " must be contiguous (call .contiguous() on it)");
}

inline void check_same_device(const char* op, const char* name, const Tensor& t, const Tensor& ref,
                              const char* ref_name) {
  PR_CHECK_VALUE(same_device(t, ref), op, ": ", name, " is on ", facade::device_name(t), " but ", ref_name, " is on ",
                 facade::device_name(ref), "; move them to one device");
}

inline void check_dim(const char* op, const char* name, const Tensor& t, int64_t d, int64_t want) {
  PR_CHECK_VALUE(t.size(d) == want, op, ": ", name, " must have size ", want, " in dimension ", d, ", got shape ",
                 shape_str(t));
}

// An image-shaped [N, H, W, C] tensor whose kernels index pixels by int row and column: H and W must fit int
// (only an image with no pixels can be larger; its shape would be cut short where it is narrowed to int).
inline void check_image_sides(const char* op, const char* name, const Tensor& t) {
  PR_CHECK_VALUE(t.size(1) <= INT32_MAX && t.size(2) <= INT32_MAX, op, ": ", name, " of shape ", shape_str(t),
                 " has more than ", INT32_MAX, " pixels along a side");
}

// Smallest and largest of every stride-th value of a contiguous CPU tensor. NaN makes `nan` true.
template <class T>
struct Range {
  T lo, hi;
  bool nan = false;
};
// Every call of an op checks its indices this way, so the scan is split over the threads (a 4096^2 rast's IDs
// span 256 MB), and the tensor's size is read once: in the stable ABI it is a call into torch, and asking for it
// on every step made the scan of 3M indices cost 10 ms.
template <class T>
Range<T> value_range(const Tensor& t, int64_t stride = 1, int64_t offset = 0) {
  const T* p = data<T>(t);
  const int64_t count = t.numel() > offset ? (t.numel() - offset + stride - 1) / stride : 0;
  const Range<T> empty{std::numeric_limits<T>::max(), std::numeric_limits<T>::lowest()};
  constexpr int64_t kChunk = int64_t(1) << 18;
  std::vector<Range<T>> parts((size_t)((count + kChunk - 1) / kChunk), empty);
  facade::parallel_for((int64_t)parts.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      Range<T> r = empty;
      const int64_t end = std::min(count, (c + 1) * kChunk);
      for (int64_t i = c * kChunk; i < end; ++i) {
        const T v = p[offset + i * stride];
        r.nan |= v != v;
        r.lo = v < r.lo ? v : r.lo;
        r.hi = v > r.hi ? v : r.hi;
      }
      parts[(size_t)c] = r;
    }
  });
  Range<T> r = empty;
  for (const Range<T>& q : parts) {
    r.nan |= q.nan;
    r.lo = q.lo < r.lo ? q.lo : r.lo;
    r.hi = q.hi > r.hi ? q.hi : r.hi;
  }
  return r;
}

// Triangle indices must lie in [0, num_vertices): checked before any kernel reads through them. `source` names
// the tensor whose vertices they index. Here for a CPU tensor only: reading a CUDA tensor on the host would
// wait for the GPU, so the op's CUDA path checks it on the device first (check_indices_cuda, core/validate.h).
inline void check_indices(const char* op, const Tensor& tri, int64_t num_vertices, const char* source = "pos") {
  if (tri.numel() == 0 || !tri.is_cpu()) return;
  const Range<int32_t> r = value_range<int32_t>(tri);
  PR_CHECK_INDEX(r.lo >= 0 && r.hi < num_vertices, op, ": tri holds vertex indices in [", r.lo, ", ", r.hi, "] but ",
                 source, " has ", num_vertices, " vertices");
}

// Memory the machine can still give this process, in bytes: MemAvailable plus SwapFree of /proc/meminfo on Linux;
// negative where unknown (elsewhere, or when it cannot be read).
inline double host_memory_available() {
#ifdef __linux__
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1.0;
  double available = -1.0, swap = 0.0;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) available = 1024.0 * (double)kib;
    if (std::sscanf(line, "SwapFree: %llu kB", &kib) == 1) swap = 1024.0 * (double)kib;
  }
  std::fclose(f);
  return available < 0.0 ? -1.0 : available + swap;
#else
  return -1.0;
#endif
}

inline std::string size_str(double bytes) {
  char s[64];
  if (bytes >= 1024.0 * 1024 * 1024)
    std::snprintf(s, sizeof s, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  else
    std::snprintf(s, sizeof s, "%.0f MiB", bytes / (1024.0 * 1024));
  return s;
}

// Bytes of an array of these dimensions (of `element`-byte values), in double: the product may not fit int64.
inline double bytes_of(std::initializer_list<int64_t> dims, double element = 4.0) {
  double b = element;
  for (int64_t d : dims) b *= (double)d;
  return b;
}

// An op about to allocate `bytes` of CPU memory for its outputs raises first when the machine cannot provide them
// (a request that cannot fit would otherwise end in std::bad_alloc or, memory being overcommitted, the OOM killer
// part way through the kernel). `like` is a tensor on the op's device: CUDA memory comes from torch's caching
// allocator, which raises torch.OutOfMemoryError by itself. Small requests skip the check (it reads a file). The
// refusal is an out-of-memory error: torch.OutOfMemoryError, as for a GPU request that cannot fit.
inline void check_host_memory(const char* op, const Tensor& like, double bytes,
                              const char* advice = "split the batch over several calls or lower the resolution") {
  if (!like.is_cpu() || bytes < double(int64_t(64) << 20)) return;
  double available = host_memory_available();
#ifndef PRERAST_CUDA_LIBRARY
  if (available >= 0.0 && bytes > available && output_cache().empty() > 0) available = host_memory_available();
#endif
  if (available >= 0.0 && bytes > available)
    facade::raise_out_of_memory(str(op, ": the outputs need ", size_str(bytes), " of memory, but only ",
                                    size_str(available), " is available (MemAvailable plus free swap); ", advice));
}

// A tensor of op's from torch's allocator. The shape was checked before, so a failed allocation is memory that
// could not be had: it raises out of memory (torch.OutOfMemoryError), naming the op, the request and torch's reason.
inline Tensor allocate(const char* op, const Tensor& like, const std::vector<int64_t>& shape, Dtype d,
                       bool zeroed = false) {
  try {
    return zeroed ? facade::new_zeros(like, shape, d) : facade::new_empty(like, shape, d);
  } catch (const std::exception& e) {
    facade::raise_out_of_memory(str(op, ": out of memory: could not allocate a ", shape_str(shape), " ",
                                    facade::dtype_name(d), " tensor on ", facade::device_name(like), " (",
                                    facade::message_of(e), ")"));
  }
}

#ifndef PRERAST_CUDA_LIBRARY
// The deleter of a cached output: its block goes back to the cache (context: the bytes it was acquired for).
inline void release_cached_output(void* data, void* context) {
  output_cache().release(data, (size_t)(uintptr_t)context);
}

// A CPU float tensor of `shape` over a block of the output cache (output_cache.h); none where the cache does not
// serve it: a small output, the cache turned off (PRERAST_CPU_OUTPUT_CACHE_MB=0), or a torch that cannot
// wrap memory of ours with a deleter (the stable ABI under torch 2.10).
inline std::optional<Tensor> cached_output(const char* op, const std::vector<int64_t>& shape) {
  double bytes = sizeof(float);
  for (int64_t d : shape) bytes *= (double)d;
  if (bytes < (double)kCachedOutputMin || bytes > double(int64_t(1) << 50)) return {};
  OutputCache& cache = output_cache();
  const std::string malformed = cache.limit_error();  // refused wherever it is set, so that it is not lost silently
  PR_CHECK_VALUE(malformed.empty(), op, ": ", malformed);
  if (!facade::can_wrap_blob() || cache.stats().limit == 0) return {};
  void* block = cache.acquire((size_t)bytes);
  if (!block)
    facade::raise_out_of_memory(str(op, ": out of memory: could not allocate a ", shape_str(shape), " ",
                                    facade::dtype_name(Dtype::Float), " tensor on cpu (", size_str(bytes), ")"));
  // Should torch fail to make the tensor, the block is not given back here: torch may have run the deleter.
  return facade::wrap_blob(block, shape, Dtype::Float, release_cached_output, (void*)(uintptr_t)bytes);
}
#endif

// A float tensor that the kernel writes in full. On the CPU a large one comes from the output cache (the memory
// of a released output of the same size, its pages already faulted in), else gets huge pages: an output far
// larger than the work that fills it (a 384 MB grad_attr from a 256x256 image) otherwise spends most of its time
// in page faults (there: 115 ms of zeroing, 12 ms with huge pages).
inline Tensor new_output(const char* op, const Tensor& like, const std::vector<int64_t>& shape) {
#ifndef PRERAST_CUDA_LIBRARY
  if (like.is_cpu())
    if (std::optional<Tensor> cached = cached_output(op, shape)) return *std::move(cached);
#endif
  Tensor t = allocate(op, like, shape, Dtype::Float);
  if (like.is_cpu() && t.numel() >= (int64_t(1) << 20))
    advise_huge_pages(data<float>(t), (size_t)t.numel() * sizeof(float));
  return t;
}

inline Tensor empty_like_float(const char* op, const Tensor& t) { return new_output(op, t, sizes(t)); }

// A zeroed float tensor for a backward pass's gradient (new_output, zeroed by all threads on the CPU).
inline Tensor new_gradient(const char* op, const Tensor& like, const std::vector<int64_t>& shape) {
  if (!like.is_cpu()) return allocate(op, like, shape, Dtype::Float, true);
  Tensor t = new_output(op, like, shape);
  float* p = data<float>(t);
  facade::parallel_for(t.numel(), int64_t(1) << 18, [p](int64_t b, int64_t e) { std::fill(p + b, p + e, 0.0f); });
  return t;
}
inline Tensor gradient_like(const char* op, const Tensor& t) { return new_gradient(op, t, sizes(t)); }

// An exception of torch's caught where it must not cross into the kernel library (a callback the library calls):
// its message, raised again on this side once the call has returned, as out of memory where the caller says it
// was (a failed allocation). Not std::exception_ptr: the stable binding would import its functions from libtorch
// (tests/builder/test_built_wheel.py audits the imports).
struct CaughtError {
  std::string message;
  bool out_of_memory = false;
  void catch_current(bool allocating = false) {
    if (!message.empty()) return;
    out_of_memory = allocating;
    try {
      throw;
    } catch (const std::exception& e) {
      message = facade::message_of(e);
    } catch (...) {
      message = "unknown exception";
    }
  }
  void rethrow(const char* op) const {
    if (message.empty()) return;
    if (out_of_memory) facade::raise_out_of_memory(str(op, ": out of memory: ", message));
    facade::raise_runtime(str(op, ": ", message));
  }
};

// CUDA scratch memory from torch's caching allocator (byte tensors on the op's device, so that the memory is
// tied to the launch stream), released when the op returns. A failed allocation gives the kernel library null
// (it returns an error) and keeps torch's message (CUDA out of memory) for rethrow(), which raises out of memory.
struct TensorWorkspace {
  const char* op;
  Tensor like;
  std::vector<Tensor> held;
  CaughtError error;
  Workspace handle() {
    Workspace w;
    w.self = this;
    w.alloc = [](void* self, size_t bytes) -> void* {
      auto* me = static_cast<TensorWorkspace*>(self);
      try {
        me->held.push_back(facade::new_empty(me->like, {(int64_t)bytes + 16}, Dtype::Byte));
      } catch (...) {
        me->error.catch_current(true);
        return nullptr;
      }
      return data<uint8_t>(me->held.back());
    };
    return w;
  }
  void rethrow() const { error.rethrow(op); }
};

// Runs the op's kernel for ref's device: cpu() in the CPU library; cuda(stream) in the CUDA library, under a
// guard for ref's device and on its current stream (cuda returns nullptr or a CUDA error message). The kernel
// of the other kind is never called here, so its code is not part of this library.
template <class Cpu, class Cuda>
void run_on_device(const char* op, const Tensor& ref, Cpu cpu, Cuda cuda) {
#ifdef PRERAST_CUDA_LIBRARY
  (void)cpu;
  const char* err = facade::on_cuda_stream(ref, [&](void* stream) { return cuda((StreamHandle)stream); });
  PR_CHECK(err == nullptr, op, ": CUDA error: ", err);
#else
  (void)cuda;
  PR_CHECK(ref.is_cpu(), op, ": got a tensor on ", facade::device_name(ref),
           ", but prerast's CUDA kernels are not loaded (python -m prerast doctor says why)");
  cpu();
#endif
}

}  // namespace prerast

#include "kernel_calls.h"

// Each op file registers its kernels under the dispatch key of the library being built.
#ifdef PRERAST_CUDA_LIBRARY
#define PRERAST_KERNELS(m) PRERAST_LIBRARY_IMPL(CUDA, m)
#else
#define PRERAST_KERNELS(m) PRERAST_LIBRARY_IMPL(CPU, m)
#endif
