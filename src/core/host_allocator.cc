// The host allocator (host_allocator.h): small blocks are plain aligned_alloc/free; live large
// blocks are remembered with their sizes, and freed ones wait in a FIFO cache for a request of the
// same rounded size.
#include "core/host_allocator.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "palladium/error.h"

namespace palladium::detail {
namespace {

constexpr size_t kSmallAlignment = 64;           // a cache line, and enough for any vector load
constexpr size_t kLarge = size_t{2} << 20;        // a huge page: blocks from here are large

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

size_t cache_limit() {
  if (kSanitized) return 0;
  const char* v = std::getenv("PALLADIUM_HOST_CACHE_MB");
  return v == nullptr || *v == '\0' ? size_t{1024} << 20 : parse_host_cache_mb(v);
}

struct LargeBlocks {
  std::mutex mu;
  std::unordered_map<void*, size_t> live;      // block -> its rounded size
  std::list<std::pair<size_t, void*>> cached;  // oldest first
  size_t cached_bytes = 0;
  size_t limit = cache_limit();
};

LargeBlocks& large() {
  static auto* blocks = new LargeBlocks;  // never destroyed: Arrays may be freed during exit
  return *blocks;
}

void release_cache(LargeBlocks& b) {
  for (auto& [size, p] : b.cached) std::free(p);
  b.cached.clear();
  b.cached_bytes = 0;
}

// Frees a large block, or keeps it for the next request of its size.
void free_large(void* p) {
  LargeBlocks& b = large();
  std::lock_guard<std::mutex> lock(b.mu);
  auto it = b.live.find(p);
  const size_t size = it->second;
  b.live.erase(it);
  if (size > b.limit) return std::free(p);
  b.cached.emplace_back(size, p);
  b.cached_bytes += size;
  while (b.cached_bytes > b.limit) {
    b.cached_bytes -= b.cached.front().first;
    std::free(b.cached.front().second);
    b.cached.pop_front();
  }
}

}  // namespace

size_t parse_host_cache_mb(const char* value) {
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(value, &end, 10);
  if (end == value || *end != '\0' || value[0] == '-' || mb > (uint64_t{1} << 40))
    throw Error(std::string("PALLADIUM_HOST_CACHE_MB='") + value + "' is not a whole number of MiB");
  return static_cast<size_t>(mb) << 20;
}

HostBlock host_allocate(size_t bytes) {
  if (bytes < kLarge) {
    const size_t rounded = (bytes + kSmallAlignment - 1) / kSmallAlignment * kSmallAlignment;
    if (rounded < bytes) return {};
    return {std::aligned_alloc(kSmallAlignment, rounded == 0 ? kSmallAlignment : rounded), std::free};
  }
  const size_t rounded = (bytes + kLarge - 1) / kLarge * kLarge;
  if (rounded < bytes) return {};
  LargeBlocks& b = large();
  std::lock_guard<std::mutex> lock(b.mu);
  for (auto it = b.cached.begin(); it != b.cached.end(); ++it)
    if (it->first == rounded) {
      void* p = it->second;
      b.cached_bytes -= rounded;
      b.cached.erase(it);
      b.live[p] = rounded;
      return {p, free_large};
    }
  void* p = std::aligned_alloc(kLarge, rounded);
  if (p == nullptr && !b.cached.empty()) {  // memory held by the cache goes back first
    release_cache(b);
    p = std::aligned_alloc(kLarge, rounded);
  }
  if (p == nullptr) return {};
  ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without THP the pages are 4 KiB
  b.live[p] = rounded;
  return {p, free_large};
}

size_t host_cache_limit() { return large().limit; }

size_t host_cached_bytes() {
  LargeBlocks& b = large();
  std::lock_guard<std::mutex> lock(b.mu);
  return b.cached_bytes;
}

}  // namespace palladium::detail
