// The cpu backend's thread pool: every index runs once, exceptions reach the caller, several
// callers share the workers, programs of one grid run on every thread (the caller included), and
// a frame too large for the caller's stack runs on the workers only.
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "backends/cpu/thread_pool.h"
#include "tests/cpu/cpu_test_util.h"

namespace palladium::cpu_test {
namespace {

using pl::cpu::ThreadPool;

TEST(CpuThreadPool, EveryIndexRunsOnce) {
  std::vector<std::atomic<int>> hits(1000);
  ThreadPool::instance().run(1000, 7, 0, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(CpuThreadPool, OneThreadMeansTheCallerAlone) {
  // PALLADIUM_NUM_THREADS=1 once ran programs on the caller and a worker at once.
  ThreadPool pool(1, 8u << 20);
  EXPECT_EQ(pool.size(), 1);
  std::mutex mu;
  std::set<std::thread::id> ran_on;
  std::vector<int> hits(64, 0);
  pool.run(64, 1, 0, [&](int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(mu);
    ran_on.insert(std::this_thread::get_id());
    for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
  });
  EXPECT_EQ(ran_on, std::set<std::thread::id>{std::this_thread::get_id()});
  for (int h : hits) EXPECT_EQ(h, 1);
  // A frame too large for the caller's stack still runs, on the pool's one worker.
  std::atomic<int> large{0};
  pool.run(4, 1, int64_t{1} << 40, [&](int64_t b, int64_t e) { large += static_cast<int>(e - b); });
  EXPECT_EQ(large.load(), 4);
}

TEST(CpuThreadPool, ExceptionsReachTheCaller) {
  EXPECT_THROW(ThreadPool::instance().run(100, 1, 0, [](int64_t begin, int64_t) {
    if (begin == 50) throw pl::Error("program 50 failed");
  }), pl::Error);
  std::atomic<int64_t> sum{0};  // still usable
  ThreadPool::instance().run(10, 1, 0, [&](int64_t b, int64_t) { sum += b; });
  EXPECT_EQ(sum.load(), 45);
}

TEST(CpuThreadPool, SeveralCallersAtOnce) {
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int round = 0; round < 20; ++round)
        ThreadPool::instance().run(50, 3, 0, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 20 * 50);
}

TEST(CpuThreadPool, ProgramsSpreadOverTheWorkers) {
  ThreadPool& pool = ThreadPool::instance();
  if (pool.size() < 2) GTEST_SKIP() << "one worker";
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  pool.run(pool.size(), 1, 0, [&](int64_t, int64_t) {
    arrived.fetch_add(1);
    // Hold each program until every worker has one, so no worker can take two.
    for (int spin = 0; spin < 2000000 && arrived.load() < pool.size(); ++spin) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(static_cast<int>(ids.size()), pool.size());
  EXPECT_GE(pool.stack_bytes(), uint64_t{8} << 20);
}

TEST(CpuThreadPool, LargeFramesStayOnTheWorkers) {
  ThreadPool& pool = ThreadPool::instance();
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> on_caller{0};
  pool.run(64, 1, int64_t{1} << 40, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() == caller) on_caller.fetch_add(1);
  });
  EXPECT_EQ(on_caller.load(), 0);
}

}  // namespace
}  // namespace palladium::cpu_test
