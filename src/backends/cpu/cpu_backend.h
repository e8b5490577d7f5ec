// The native CPU backend: IR -> C++ -> host compiler -> shared object -> dlopen.
// Environment:
//   CXX, PALLADIUM_CPU_CXXFLAGS            the compiler and extra flags (host_compiler.h)
//   PALLADIUM_NUM_THREADS                  threads running programs, caller included (thread_pool.h)
//   PALLADIUM_CPU_STACK_MB                 stack of each worker thread; tiles live there
//   PALLADIUM_CACHE_DIR, _CACHE_MAX_MB     the disk cache (backends/common/disk_cache.h)
//   PALLADIUM_CPU_VERBOSE=1                one line per kernel compiled or loaded, with its time
//   PALLADIUM_CPU_KEEP_OBJECTS=1           keep loaded shared objects on disk, for profilers
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
