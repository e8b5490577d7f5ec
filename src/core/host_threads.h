// Host reference ops and random draws over large arrays: each element is computed on its own, so
// [0, n) is cut into one contiguous chunk per hardware thread. Results do not depend on the split.
#pragma once
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace palladium {

// Calls fn(begin, end) over [0, n): on this thread alone when n < min_per_thread * 2 (starting
// threads would cost more than it saves), else once per chunk on its own thread.
template <class Fn>
void parallel_chunks(int64_t n, int64_t min_per_thread, Fn&& fn) {
  const int64_t threads =
      std::clamp<int64_t>(std::min<int64_t>(std::thread::hardware_concurrency(), n / std::max<int64_t>(min_per_thread, 1)), 1, 64);
  if (threads <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back([&fn, n, t, threads] { fn(n * t / threads, n * (t + 1) / threads); });
  for (std::thread& th : pool) th.join();
}

}  // namespace palladium
