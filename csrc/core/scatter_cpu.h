// Deterministic parallel scatter-add on the host: used by the CPU backward passes that accumulate many
// per-pixel contributions into a shared gradient.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <new>

#include "common.h"
#include "host_pages.h"

namespace prerast {

// The per-chunk copies are kept from call to call (per calling thread) and left zeroed: they are cleared as
// they are added to dest. A fresh gradient-sized buffer per call would pay for the kernel zeroing its pages,
// which for many vertices and few pixels costs more than the scatter itself. Copies larger than this are
// released after the call instead.
constexpr size_t kKeptScatterBytes = size_t(1) << 28;  // 256 MiB

// Whether chunked_scatter sums a gradient of `size` elements, gathered from n items in num_chunks chunks, in
// double: when its double copies take at most max_bytes, and the items are not fewer than the elements (else most
// elements get few contributions, and zeroing and summing a double copy would cost more than the scatter itself).
inline bool wide_scatter(int64_t n, int64_t size, int num_chunks, int64_t max_bytes) {
  return size <= n && (double)size * sizeof(double) * std::max(num_chunks, 1) <= (double)max_bytes;
}

// Whether a gradient of `size` elements is better split into one band of it per thread, every thread walking all n
// items, than copied once per extra chunk and the copies summed: when it exceeds some 16 elements per item and
// extra thread (a copy costs a few passes over the gradient, a band every extra thread a walk over the items).
inline bool bands_over_copies(int64_t size, int64_t n, int num_chunks) {
  return num_chunks > 1 && size > 16 * n * (int64_t)(num_chunks - 1);
}

// The spare copies, on huge pages: a scatter's additions land all over them, and with 4 KiB pages many would also
// miss the TLB (a 1024^2 RGB texture's double copy spans 6k such pages).
template <class Acc>
struct SpareCopies {
  Acc* data = nullptr;
  size_t size = 0;
  SpareCopies() = default;
  SpareCopies(const SpareCopies&) = delete;
  SpareCopies& operator=(const SpareCopies&) = delete;
  ~SpareCopies() { release(); }
  void release() {
    aligned_free(data);
    data = nullptr, size = 0;
  }
  // At least n elements, all zero.
  void reserve(size_t n, const ParallelFor& pfor) {
    if (size >= n) return;
    release();
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t bytes = (n * sizeof(Acc) + kHuge - 1) / kHuge * kHuge;
    data = static_cast<Acc*>(aligned_malloc(kHuge, bytes));
    if (!data) throw std::bad_alloc();
    advise_huge_pages(data, bytes);
    size = bytes / sizeof(Acc);
    Acc* d = data;
    pfor((int64_t)size, 1 << 18, [d](int64_t b, int64_t e) { std::fill(d + b, d + e, Acc(0)); });
  }
};

template <class Acc>
SpareCopies<Acc>& scatter_copies() {
  thread_local SpareCopies<Acc> copies;  // all zero between calls
  return copies;
}

// Splits [0, n) into at most num_chunks ranges run in parallel and adds what body(begin, end, g) scatters into g
// to dest, summing the chunks in chunk order, so that the result does not depend on thread scheduling.
// Acc = double: every chunk scatters into a zeroed double copy, and dest gets the double sum rounded once, so
// that millions of contributions to one element (every pixel of a large triangle adds into its three vertices)
// lose no precision. Acc = float: chunk 0 scatters straight into dest, the others into float copies; for
// gradients whose elements each get few contributions (a texture larger than the image).
template <class Acc, class Body>
void chunked_scatter(int64_t n, float* dest, int64_t size, int num_chunks, const ParallelFor& pfor, Body body) {
  constexpr bool wide = sizeof(Acc) > sizeof(float);
  num_chunks = (int)std::max<int64_t>(1, std::min<int64_t>(num_chunks, n / 4096 + 1));
  const int copies = wide ? num_chunks : num_chunks - 1;
  SpareCopies<Acc>& extra = scatter_copies<Acc>();
  extra.reserve((size_t)copies * size, pfor);
  Acc* first_copy = extra.data - (wide ? 0 : size);  // chunk c's copy is first_copy + c * size
  pfor(num_chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c)
      body(n * c / num_chunks, n * (c + 1) / num_chunks, !wide && c == 0 ? (Acc*)dest : first_copy + c * size);
  });
  // Each element's sum is dest, then the copies in chunk order; worked out a block of elements at a time, copy
  // after copy, so that the loops vectorise (the same additions in the same order as element after element).
  if (copies > 0)
    pfor(size, 1 << 16, [&](int64_t b, int64_t e) {
      constexpr int64_t kBlock = 512;
      Acc sum[kBlock];
      for (int64_t i0 = b; i0 < e; i0 += kBlock) {
        const int64_t m = std::min(kBlock, e - i0);
        for (int64_t j = 0; j < m; ++j) sum[j] = dest[i0 + j];
        for (int c = wide ? 0 : 1; c < num_chunks; ++c) {
          Acc* __restrict copy = first_copy + c * size + i0;
          for (int64_t j = 0; j < m; ++j) sum[j] += copy[j], copy[j] = 0;
        }
        for (int64_t j = 0; j < m; ++j) dest[i0 + j] = (float)sum[j];
      }
    });
  if (extra.size * sizeof(Acc) > kKeptScatterBytes) extra.release();
}

// chunked_scatter in double where wide (wide_scatter says when), else in float: body(begin, end, g) is generic
// over g's element type.
template <class Body>
void chunked_scatter(bool wide, int64_t n, float* dest, int64_t size, int num_chunks, const ParallelFor& pfor,
                     Body body) {
  if (wide)
    chunked_scatter<double>(n, dest, size, num_chunks, pfor, body);
  else
    chunked_scatter<float>(n, dest, size, num_chunks, pfor, body);
}

}  // namespace prerast
