// The disk cache (backends/common/disk_cache.h) and the cpu backend's use of it: entries round-trip,
// corrupt, truncated and foreign entries are misses, the size cap evicts the least recently used,
// a second process-level compile loads from disk, and concurrent first calls compile once.
#include <unistd.h>

#include <atomic>
#include <optional>
#include <set>
#include <filesystem>
#include <fstream>
#include <thread>

#include "backends/common/disk_cache.h"
#include "tests/cpu/cpu_test_util.h"

namespace palladium::cpu_test {
namespace {

namespace fs = std::filesystem;
using pl::backend::DiskCache;

using test_support::ScopedEnv;

// A fresh cache directory, removed afterwards, made current through PALLADIUM_CACHE_DIR.
class FreshCache {
 public:
  FreshCache() : dir_(make()), env_("PALLADIUM_CACHE_DIR", dir_) {}
  ~FreshCache() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const std::string& dir() const { return dir_; }
  std::vector<fs::path> entries(const std::string& kind) const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir_ + "/" + kind))
      if (e.path().extension() == ".plc") out.push_back(e.path());
    return out;
  }

 private:
  static std::string make() {
    std::string pattern = (fs::temp_directory_path() / "palladium-cache-test-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    return pattern;
  }
  std::string dir_;
  ScopedEnv env_;
};

void flip_byte(const fs::path& p, std::streamoff from_end) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-from_end, std::ios::end);
  c = static_cast<char>(c ^ 0x5a);
  f.write(&c, 1);
}

TEST(CpuDiskCache, EntriesRoundTrip) {
  FreshCache fresh;
  DiskCache cache("unit");
  ASSERT_TRUE(cache.enabled());
  const std::string payload("binary\0payload\xff", 15);
  const std::string path = cache.store("key one", payload);
  EXPECT_EQ(path, cache.path_for("key one"));
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(cache.load("key one"), payload);
  EXPECT_FALSE(cache.load("key two"));
  EXPECT_EQ(DiskCache("other").load("key one"), std::nullopt);  // the kind is part of the key
}

TEST(CpuDiskCache, CorruptTruncatedAndForeignEntriesAreMisses) {
  FreshCache fresh;
  DiskCache cache("unit");
  const std::string payload(5000, 'p');
  cache.store("k", payload);
  flip_byte(cache.path_for("k"), 10);
  EXPECT_FALSE(cache.load("k"));
  EXPECT_FALSE(fs::exists(cache.path_for("k")));  // dropped, so the rebuilt entry replaces it
  cache.store("k", payload);
  fs::resize_file(cache.path_for("k"), fs::file_size(cache.path_for("k")) - 100);
  EXPECT_FALSE(cache.load("k"));
  // An intact entry for another key sitting at k's path (a hash collision, or a copied file).
  fs::copy_file(cache.store("other", payload), cache.path_for("k"), fs::copy_options::overwrite_existing);
  EXPECT_FALSE(cache.load("k"));
  EXPECT_EQ(cache.load("other"), payload);
}

TEST(CpuDiskCache, SizeCapEvictsTheLeastRecentlyUsed) {
  FreshCache fresh;
  ScopedEnv cap("PALLADIUM_CACHE_MAX_MB", "1");
  DiskCache cache("unit");
  const std::string big(400 << 10, 'x');
  cache.store("a", big);
  cache.store("b", big);
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(cache.path_for("a"), now - std::chrono::seconds(100));
  fs::last_write_time(cache.path_for("b"), now - std::chrono::seconds(50));
  EXPECT_TRUE(cache.load("a"));  // a is now the most recently used
  cache.store("c", big);         // 1.2 MB > 1 MB: b goes
  EXPECT_TRUE(fs::exists(cache.path_for("a")));
  EXPECT_FALSE(fs::exists(cache.path_for("b")));
  EXPECT_TRUE(fs::exists(cache.path_for("c")));
}

TEST(CpuDiskCache, OffDisablesIt) {
  ScopedEnv off("PALLADIUM_CACHE_DIR", "off");
  DiskCache cache("unit");
  EXPECT_FALSE(cache.enabled());
  EXPECT_EQ(cache.store("k", "v"), "");
  EXPECT_FALSE(cache.load("k"));
}

TEST(CpuDiskCache, HashIsStableAndSpreads) {
  EXPECT_EQ(pl::backend::hash_hex("palladium"), pl::backend::hash_hex("palladium"));
  EXPECT_EQ(pl::backend::hash_hex("").size(), 32u);
  std::set<std::string> seen;
  for (const std::string& s : std::vector<std::string>{"", "a", std::string("a\0", 2), "b", "ab", "ba", "abcdefgh", "abcdefgi"})
    seen.insert(pl::backend::hash_hex(s));
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(pl::backend::hash_hex("palladium"), "e937c1bdc455fb88e481318363006b09");  // pinned: keys must not drift
}

// A kernel whose source is new to this process and to the cache: `salt` is baked into it.
pl::Callable<pl::Array> salted_kernel(float salt) {
  return pl::pallas_call([salt](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * salt + 1.0f; },
                         pl::ShapeDtype({64}, pl::f32), {.name = "salted", .backend = "cpu"});
}
float fresh_salt() { return static_cast<float>(seed() % 100000) + 0.25f + static_cast<float>(std::rand() % 1000) * 1e-3f; }

TEST(CpuKernelCache, ASecondProcessLoadsFromDisk) {
  FreshCache fresh;
  const float salt = fresh_salt();
  pl::Array x = pl::arange(64).astype(pl::f32);
  const pl::cpu::CacheStats before = pl::cpu::cache_stats();
  pl::Array first = salted_kernel(salt)(x);
  EXPECT_EQ(pl::cpu::cache_stats().compiles, before.compiles + 1);
  EXPECT_EQ(fresh.entries("cpu").size(), 1u);
  pl::cpu::clear_memory_cache();  // as a new process would start
  pl::Array second = salted_kernel(salt)(x);
  EXPECT_EQ(pl::cpu::cache_stats().compiles, before.compiles + 1);
  EXPECT_EQ(pl::cpu::cache_stats().disk_hits, before.disk_hits + 1);
  EXPECT_TRUE(same(first, second));
  EXPECT_FLOAT_EQ(second.get(3), 3 * salt + 1);
}

TEST(CpuKernelCache, KernelsLoadedOneAfterAnotherStayDistinct) {
  // Regression: glibc knows loaded objects by inode; when the file behind one kernel was freed,
  // the next kernel's file could reuse its inode and dlopen returned the first kernel again.
  FreshCache fresh;
  const float base = fresh_salt();
  pl::Array x = pl::arange(64).astype(pl::f32);
  for (int k = 0; k < 4; ++k) salted_kernel(base + static_cast<float>(k))(x);
  pl::cpu::clear_memory_cache();
  std::vector<pl::Callable<pl::Array>> calls;
  for (int k = 0; k < 4; ++k) calls.push_back(salted_kernel(base + static_cast<float>(k)));
  for (int k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(calls[static_cast<size_t>(k)](x).get(2), 2 * (base + static_cast<float>(k)) + 1) << k;
}

TEST(CpuKernelCache, ACorruptEntryIsRecompiled) {
  FreshCache fresh;
  const float salt = fresh_salt();
  pl::Array x = pl::arange(64).astype(pl::f32);
  salted_kernel(salt)(x);
  ASSERT_EQ(fresh.entries("cpu").size(), 1u);
  flip_byte(fresh.entries("cpu")[0], 200);  // inside the shared object
  pl::cpu::clear_memory_cache();
  const pl::cpu::CacheStats before = pl::cpu::cache_stats();
  pl::Array again = salted_kernel(salt)(x);
  EXPECT_EQ(pl::cpu::cache_stats().compiles, before.compiles + 1);
  EXPECT_FLOAT_EQ(again.get(5), 5 * salt + 1);
  pl::cpu::clear_memory_cache();  // the rewritten entry is good
  salted_kernel(salt)(x);
  EXPECT_EQ(pl::cpu::cache_stats().disk_hits, before.disk_hits + 1);
}

TEST(CpuKernelCache, ConcurrentFirstCallsCompileOnce) {
  FreshCache fresh;
  const float salt = fresh_salt();
  pl::Array x = pl::arange(64).astype(pl::f32);
  const pl::cpu::CacheStats before = pl::cpu::cache_stats();
  constexpr int kThreads = 8;
  std::atomic<int> ready{0};
  std::vector<pl::Array> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto call = salted_kernel(salt);  // separate Callables: the backend must share the build
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      results[static_cast<size_t>(t)] = call(x);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(pl::cpu::cache_stats().compiles, before.compiles + 1);
  for (const pl::Array& r : results) EXPECT_TRUE(same(r, results[0]));
}

TEST(CpuKernelCache, FlagsArePartOfTheKey) {
  FreshCache fresh;
  const float salt = fresh_salt();
  pl::Array x = pl::arange(64).astype(pl::f32);
  salted_kernel(salt)(x);
  const pl::cpu::CacheStats before = pl::cpu::cache_stats();
  ScopedEnv flags("PALLADIUM_CPU_CXXFLAGS", "-DPALLADIUM_TEST_FLAG=1");
  salted_kernel(salt)(x);
  EXPECT_EQ(pl::cpu::cache_stats().compiles, before.compiles + 1);
  EXPECT_EQ(fresh.entries("cpu").size(), 2u);
}

}  // namespace
}  // namespace palladium::cpu_test
