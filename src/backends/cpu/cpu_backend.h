// The native CPU backend: IR -> C++ -> host compiler -> shared object -> dlopen.
// Environment: CXX and PALLADIUM_CPU_CXXFLAGS (host_compiler.h), PALLADIUM_NUM_THREADS and
// PALLADIUM_CPU_STACK_MB (thread_pool.h), PALLADIUM_CACHE_DIR and PALLADIUM_CACHE_MAX_MB
// (backends/common/disk_cache.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "backends/backend.h"

namespace palladium::cpu {

backend::Backend& backend();

// Counters since the process started, for tests and benchmarks.
struct CacheStats {
  int64_t compiles = 0;     // runs of the host compiler
  int64_t disk_hits = 0;    // kernels loaded from the disk cache
  int64_t memory_hits = 0;  // kernels already loaded in this process
};
CacheStats cache_stats();

// Drops the kernels held in memory (the disk cache stays), so the next compile behaves as in a
// fresh process. Executables already made keep their kernels.
void clear_memory_cache();

// Tests: rewrites the generated source before it is compiled (an empty function: no rewrite).
void set_source_transform_for_testing(std::function<std::string(const std::string&)> fn);

// The number of worker threads (starts the pool).
int num_threads();

}  // namespace palladium::cpu
