// Host memory for Arrays. Small blocks come from aligned_alloc. Blocks of 2 MiB and more are
// aligned to 2 MiB and backed by transparent huge pages where the kernel offers them
// (MADV_HUGEPAGE), and freed ones are kept in a bounded cache. A repeated call on large arrays
// then does not fault its results' pages in again: 256 MiB cost 119 ms of page faults at 4 KiB,
// 27 ms with huge pages, and nothing from the cache. PALLADIUM_HOST_CACHE_MB sets the cache's size
// (default 1024; 0 keeps nothing). Sanitizer builds keep nothing, so that freed memory stays
// poisoned.
#pragma once
#include <cstddef>

namespace palladium::detail {

struct HostBlock {
  void* ptr = nullptr;                // at least the bytes asked for, 64-byte aligned; nullptr: out of memory
  void (*free_fn)(void*) = nullptr;   // what gives it back: std::free, or the large-block cache
};
HostBlock host_allocate(size_t bytes);
// Bytes held by the cache now, and the most it holds (0 in sanitizer builds).
size_t host_cached_bytes();
size_t host_cache_limit();
// PALLADIUM_HOST_CACHE_MB's value as bytes; an Error for anything but a whole number of MiB.
size_t parse_host_cache_mb(const char* value);

}  // namespace palladium::detail
