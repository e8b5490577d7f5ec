// The host allocator: small arrays 64-byte aligned; large ones 2 MiB aligned, and a freed large
// block serves the next request of its size (no page faults again), as long as the cache has room.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/host_allocator.h"
#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace pl = palladium;

namespace {

TEST(HostAllocator, SmallAndLargeBlocksAreAligned) {
  const pl::Array small({3}, pl::f32), large({(int64_t{5} << 20) / 4}, pl::f32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large.data()) % (uintptr_t{2} << 20), 0u);
}

TEST(HostAllocator, AFreedLargeBlockServesTheNextRequestOfItsSize) {
  if (pl::detail::host_cache_limit() == 0) GTEST_SKIP() << "no cache in sanitizer builds";
  const int64_t elements = (int64_t{37} * (2 << 20) - 100) / 4;  // a size no other test uses: 74 MiB
  const void* first = nullptr;
  const size_t before = pl::detail::host_cached_bytes();
  {
    pl::Array a({elements}, pl::f32);
    a.data_as<float>()[elements - 1] = 1.5f;
    first = a.data();
  }
  EXPECT_EQ(pl::detail::host_cached_bytes(), before + (size_t{74} << 20));
  const pl::Array b({elements}, pl::f32);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(pl::detail::host_cached_bytes(), before);
}

TEST(HostAllocator, CacheSizeMustBeAWholeNumberOfMiB) {
  EXPECT_EQ(pl::detail::parse_host_cache_mb("0"), 0u);
  EXPECT_EQ(pl::detail::parse_host_cache_mb("64"), size_t{64} << 20);
  for (const char* bad : {"lots", "12MB", "-1", ""})
    PL_EXPECT_ERROR(pl::detail::parse_host_cache_mb(bad),
                    std::string("PALLADIUM_HOST_CACHE_MB='") + bad + "' is not a whole number of MiB");
}

}  // namespace
