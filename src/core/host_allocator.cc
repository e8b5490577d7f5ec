// The host allocator (host_allocator.h): live large blocks are remembered with their sizes, freed
// ones wait in a FIFO cache for a request of the same rounded size.
#include "core/host_allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

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
  if (v == nullptr || *v == '\0') return size_t{1024} << 20;
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(v, &end, 10);
  return end != nullptr && *end == '\0' ? static_cast<size_t>(mb) << 20 : size_t{1024} << 20;
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

}  // namespace

void* host_allocate(size_t bytes) {
  if (bytes < kLarge) {
    const size_t rounded = (bytes + kSmallAlignment - 1) / kSmallAlignment * kSmallAlignment;
    if (rounded < bytes) return nullptr;
    return std::aligned_alloc(kSmallAlignment, rounded == 0 ? kSmallAlignment : rounded);
  }
  const size_t rounded = (bytes + kLarge - 1) / kLarge * kLarge;
  if (rounded < bytes) return nullptr;
  LargeBlocks& b = large();
  std::lock_guard<std::mutex> lock(b.mu);
  for (auto it = b.cached.begin(); it != b.cached.end(); ++it)
    if (it->first == rounded) {
      void* p = it->second;
      b.cached_bytes -= rounded;
      b.cached.erase(it);
      b.live[p] = rounded;
      return p;
    }
  void* p = std::aligned_alloc(kLarge, rounded);
  if (p == nullptr && !b.cached.empty()) {  // memory held by the cache goes back first
    release_cache(b);
    p = std::aligned_alloc(kLarge, rounded);
  }
  if (p == nullptr) return nullptr;
  ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without THP the pages are 4 KiB
  b.live[p] = rounded;
  return p;
}

void host_free(void* p) {
  if (p == nullptr) return;
  LargeBlocks& b = large();
  std::lock_guard<std::mutex> lock(b.mu);
  auto it = b.live.find(p);
  if (it == b.live.end()) return std::free(p);  // a small block
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

size_t host_cache_limit() { return large().limit; }

size_t host_cached_bytes() {
  LargeBlocks& b = large();
  std::lock_guard<std::mutex> lock(b.mu);
  return b.cached_bytes;
}

}  // namespace palladium::detail
