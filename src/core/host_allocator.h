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

// At least `bytes` (64-byte aligned), or nullptr when the host is out of memory.
void* host_allocate(size_t bytes);
// Frees (or caches) a block from host_allocate.
void host_free(void* p);
// Bytes held by the cache now, and the most it holds (0 in sanitizer builds).
size_t host_cached_bytes();
size_t host_cache_limit();

}  // namespace palladium::detail
