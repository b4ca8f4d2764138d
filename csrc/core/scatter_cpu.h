// Deterministic parallel scatter-add on the host: used by the CPU backward passes that accumulate many
// per-pixel contributions into a shared gradient.
#pragma once

#include <algorithm>
#include <vector>

#include "common.h"

namespace prerast {

// The per-chunk copies are kept from call to call (per calling thread) and left zeroed: they are cleared as
// they are added to dest. A fresh gradient-sized buffer per call would pay for the kernel zeroing its pages,
// which for many vertices and few pixels costs more than the scatter itself. Copies larger than this are
// released after the call instead.
constexpr size_t kKeptScatterFloats = size_t(1) << 26;  // 256 MiB

inline std::vector<float>& scatter_copies() {
  thread_local std::vector<float> copies;  // all zero between calls
  return copies;
}

// Splits [0, n) into at most num_chunks ranges run in parallel; chunk 0 scatters straight into dest, every other
// chunk into its own zeroed copy of it (size floats), and the copies are added to dest in chunk order, so the
// result does not depend on thread scheduling. body(begin, end, g) scatters range [begin, end) into g.
template <class Body>
void chunked_scatter(int64_t n, float* dest, int64_t size, int num_chunks, const ParallelFor& pfor, Body body) {
  num_chunks = (int)std::max<int64_t>(1, std::min<int64_t>(num_chunks, n / 4096 + 1));
  std::vector<float>& extra = scatter_copies();
  const size_t needed = (size_t)(num_chunks - 1) * size;
  if (extra.size() < needed) extra.resize(needed, 0.0f);
  pfor(num_chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c)
      body(n * c / num_chunks, n * (c + 1) / num_chunks, c == 0 ? dest : extra.data() + (c - 1) * size);
  });
  if (num_chunks == 1) return;
  pfor(size, 1 << 16, [&](int64_t b, int64_t e) {
    for (int c = 1; c < num_chunks; ++c) {
      float* src = extra.data() + (c - 1) * size;
      for (int64_t i = b; i < e; ++i) dest[i] += src[i], src[i] = 0.0f;
    }
  });
  if (extra.size() > kKeptScatterFloats) std::vector<float>().swap(extra);
}

}  // namespace prerast
