// Host reference ops and random draws over large arrays compute each element on its own, so
// [0, n) is cut into chunks run on the library's CPU thread pool (backends/cpu/thread_pool.h, sized
// by PALLADIUM_NUM_THREADS). Results do not depend on the split.
#pragma once
#include <algorithm>
#include <cstdint>

#include "backends/cpu/thread_pool.h"

namespace palladium {

// Calls fn(begin, end) over [0, n): on this thread alone when n < 2 * min_per_chunk (handing
// out chunks would cost more than it saves), else in one chunk per pool thread.
template <class Fn>
void parallel_chunks(int64_t n, int64_t min_per_chunk, Fn&& fn) {
  min_per_chunk = std::max<int64_t>(min_per_chunk, 1);
  if (n < 2 * min_per_chunk) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  cpu::ThreadPool& pool = cpu::ThreadPool::instance();
  const int64_t per_thread = (n + pool.size() - 1) / pool.size();
  pool.run(n, std::max(min_per_chunk, per_thread), 0, fn);
}

}  // namespace palladium
