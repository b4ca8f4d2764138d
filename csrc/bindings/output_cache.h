// Large CPU outputs reuse the memory of released ones. A fresh multi-megabyte buffer is faulted in, and zeroed by
// the kernel, page by page as it is first written: at 4096^2 that cost 63 ms of system time per rasterize call,
// against 17 ms for writing the same bytes into warm memory. torch's CPU allocator hands large blocks back to the
// OS at every free, so a loop at a fixed resolution would pay it on every call; this cache keeps released blocks
// (bounded, oldest dropped first) for the next output of the same size, as torch's CUDA allocator does on the GPU.
// Torch-free: the bindings wrap its blocks into tensors whose deleter gives them back (common.h's new_output).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "../core/host_pages.h"

namespace prerast {

// Outputs from this size on come from the cache; smaller ones are served warm from malloc's heap anyway.
constexpr size_t kCachedOutputMin = size_t(1) << 20;
// The variable that sets the bound in MiB (0 turns the cache off).
constexpr const char* kOutputCacheVariable = "PRERAST_CPU_OUTPUT_CACHE_MB";

// Physical memory in bytes, 0 where unknown (library.cpp: on Windows it needs <windows.h>, whose macros the other
// files are kept from).
uint64_t physical_memory();

class OutputCache {
 public:
  struct Stats {
    int64_t held_bytes, held_blocks, limit, reused, allocated, live_blocks;
  };

  // Bytes of the block that serves a request of `bytes`: blocks of 2 MiB and more are whole huge pages (aligned
  // to and sized in 2 MiB), smaller ones whole 4 KiB pages. Requests of one class share blocks.
  static size_t block_size(size_t bytes) { return round_up(bytes, alignment(bytes)); }

  // A block of block_size(bytes): the newest released one of that size, else a new one (advised huge pages), else
  // null (no memory, even after dropping every released block).
  void* acquire(size_t bytes) {
    const size_t size = block_size(bytes);
    void* p = take(size);
    const bool reused = p != nullptr;
    if (!reused) {
      p = aligned_malloc(alignment(size), size);
      if (!p && empty() > 0) p = aligned_malloc(alignment(size), size);
      if (!p) return nullptr;
      advise_huge_pages(p, size);
    }
    bool poison;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++live_, (reused ? reused_ : allocated_) += 1;
      poison = poison_;
    }
    if (poison) std::memset(p, 0xff, size);  // NaN in every float: shows what a kernel left unwritten
    return p;
  }

  // Gives back a block of acquire(bytes) (any thread): kept for reuse within the bound, the oldest dropped first.
  void release(void* p, size_t bytes) {
    const size_t size = block_size(bytes);
    std::vector<void*> drop;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --live_;
      const int64_t limit = resolved_limit();
      if (limit <= 0 || size > (uint64_t)limit) {
        drop.push_back(p);
      } else {
        held_.push_back({p, size});
        held_bytes_ += size;
        trim((uint64_t)limit, drop);
      }
    }
    for (void* q : drop) aligned_free(q);  // outside the lock: unmapping hundreds of MB takes a while
  }

  // Frees every released block; returns the bytes freed.
  size_t empty() {
    std::vector<void*> drop;
    size_t freed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      freed = held_bytes_;
      trim(0, drop);
    }
    for (void* q : drop) aligned_free(q);
    return freed;
  }

  // Why the bound cannot be read (a malformed PRERAST_CPU_OUTPUT_CACHE_MB), or empty.
  std::string limit_error() {
    std::lock_guard<std::mutex> lock(mutex_);
    resolved_limit();
    return limit_error_;
  }

  // For tests: a bound in bytes (negative: the environment's or the default again), and whether every block
  // handed out is first filled with NaN.
  void configure(int64_t limit, bool poison) {
    std::vector<void*> drop;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = limit < 0 ? kUnread : limit;
      poison_ = poison;
      const int64_t bound = resolved_limit();
      trim(bound > 0 ? (uint64_t)bound : 0, drop);
    }
    for (void* q : drop) aligned_free(q);
  }

  Stats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t limit = resolved_limit();
    return {(int64_t)held_bytes_, (int64_t)held_.size(), limit, reused_, allocated_, live_};
  }

 private:
  struct Block {
    void* p;
    size_t size;
  };
  static constexpr int64_t kUnread = -2;

  static size_t alignment(size_t bytes) { return bytes >= (size_t(2) << 20) ? size_t(2) << 20 : size_t(4) << 10; }
  static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

  void* take(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = held_.size(); i-- > 0;) {  // newest first: its pages are the likeliest still in cache
      if (held_[i].size != size) continue;
      void* p = held_[i].p;
      held_.erase(held_.begin() + (ptrdiff_t)i);
      held_bytes_ -= size;
      return p;
    }
    return nullptr;
  }

  // Drops the oldest released blocks until at most `bound` bytes are held (mutex_ held).
  void trim(uint64_t bound, std::vector<void*>& drop) {
    size_t n = 0;
    while (n < held_.size() && held_bytes_ > bound) held_bytes_ -= held_[n].size, drop.push_back(held_[n++].p);
    held_.erase(held_.begin(), held_.begin() + (ptrdiff_t)n);
  }

  // The bound in bytes (mutex_ held), read once: PRERAST_CPU_OUTPUT_CACHE_MB, else an eighth of physical memory
  // up to 4 GiB (a training loop's outputs at one resolution; 1 GiB where the memory is unknown). A malformed
  // value turns the cache off and is reported by limit_error().
  int64_t resolved_limit() {
    if (limit_ != kUnread) return limit_;
    const char* text = std::getenv(kOutputCacheVariable);
    if (text && *text) {
      char* end = nullptr;
      const unsigned long long mib = std::strtoull(text, &end, 10);
      const bool whole = *text >= '0' && *text <= '9' && *end == '\0' && mib <= (1ull << 40);
      limit_ = whole ? (int64_t)(mib << 20) : 0;
      if (!whole)
        limit_error_ = std::string(kOutputCacheVariable) + "='" + text +
                       "' is not a whole number of MiB; set it to the MiB of released CPU outputs to keep for "
                       "reuse (0 keeps none), or unset it for the default";
    } else {
      const uint64_t physical = physical_memory();
      limit_ = physical ? (int64_t)std::min<uint64_t>(physical / 8, uint64_t(4) << 30) : int64_t(1) << 30;
    }
    return limit_;
  }

  std::mutex mutex_;
  std::vector<Block> held_;  // released blocks, oldest first
  size_t held_bytes_ = 0;
  int64_t limit_ = kUnread;
  std::string limit_error_;
  bool poison_ = false;
  int64_t reused_ = 0, allocated_ = 0, live_ = 0;
};

// The one cache of the library. Never destroyed: a tensor may release its block during interpreter shutdown,
// after static destructors ran.
inline OutputCache& output_cache() {
  static OutputCache* cache = new OutputCache();
  return *cache;
}

}  // namespace prerast
