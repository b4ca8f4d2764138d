// Fresh host buffers of many megabytes: their pages are faulted in (and zeroed by the kernel) one 4 KiB page at a
// time as they are first written, which costs several times the writing itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(_WIN32)
#include <malloc.h>
#endif

namespace prerast {

// bytes (a multiple of alignment, a power of two) aligned to alignment, or null; released by aligned_free. The C
// runtimes of Windows (MSVC's and mingw-w64's) have no std::aligned_alloc: theirs is _aligned_malloc, whose memory
// std::free must not release. Apple's libc++ declares std::aligned_alloc only for macOS 10.15 and later
// (-mmacosx-version-min): posix_memalign, freed by std::free, serves every macOS.
inline void* aligned_malloc(size_t alignment, size_t bytes) {
#if defined(_WIN32)
  return _aligned_malloc(bytes, alignment);
#elif defined(__APPLE__)
  void* p = nullptr;
  return posix_memalign(&p, alignment, bytes) == 0 ? p : nullptr;
#else
  return std::aligned_alloc(alignment, bytes);
#endif
}

inline void aligned_free(void* p) {
#if defined(_WIN32)
  _aligned_free(p);
#else
  std::free(p);
#endif
}

// Asks for transparent huge pages over the 2 MiB-aligned part of [p, p + bytes): 512 times fewer faults. A hint,
// harmless where the kernel ignores it.
inline void advise_huge_pages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const uintptr_t begin = ((uintptr_t)p + kHuge - 1) & ~(kHuge - 1), end = ((uintptr_t)p + bytes) & ~(kHuge - 1);
  if (end > begin) madvise((void*)begin, end - begin, MADV_HUGEPAGE);
#else
  (void)p, (void)bytes;
#endif
}

}  // namespace prerast
