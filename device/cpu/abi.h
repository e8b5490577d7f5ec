// The contract between the cpu backend (src/backends/cpu) and the shared objects it compiles.
//
// A compiled kernel exports two C functions:
//   int  palladium_cpu_abi_version(void);   returns kAbiVersion, checked after dlopen
//   void palladium_cpu_run(const Launch*, int64_t begin, int64_t end);
//        runs the programs whose row-major linear ids lie in [begin, end), one after another.
// Several threads call palladium_cpu_run at once with disjoint ranges.
//
// Device headers include nothing outside device/cpu/ except the compiler's own standard headers,
// so the library can embed them and write them next to the generated source.
#pragma once
#include <stdint.h>

namespace pl_cpu {

inline constexpr int kAbiVersion = 4;

struct Launch {
  // Base pointer of each ref's whole array, in kernel ref order (inputs, then outputs).
  void* const* refs;
  // debug_print: `values` point at each printed value in its compute type (scalars at the
  // variable, tiles at their first element); the host knows their types from the IR.
  void* host;
  void (*print)(void* host, int32_t print_id, const int64_t* program, const void* const* values);
  // Checked runs (CompilerParams::checks): a failed bounds check at access site `site` (kind 0:
  // `value` is an index outside dimension `dim` of the ref; kind 1: the block origin `value` along
  // array dimension `dim` puts the block outside the array). The program then returns.
  void (*fail)(void* host, int32_t site, int32_t kind, int32_t dim, int64_t value, const int64_t* program);
  // float32 matrix products (gemm.h's GemmArgs): the library's GEMM for this CPU, compiled once.
  void (*gemm_f32)(const void* gemm_args);
  // The workers that run this launch's programs (the thread pool's size).
  int32_t threads;
};

}  // namespace pl_cpu

#define PL_EXPORT extern "C" __attribute__((visibility("default")))
#define PL_INLINE inline __attribute__((always_inline))

// The first statement of every loop the IR's For/While becomes. Those loops are sequential
// recurrences; the tile loops inside them are what should vectorise. An empty volatile asm keeps
// GCC from vectorising the outer loop across its iterations, which it otherwise attempts once the
// inner loops are fully unrolled, and which GCC 12.2 miscompiles at -O3 for AVX2/AVX-512 (a loop
// accumulating rows loaded through a conditional path returned wrong sums).
#define PL_SEQUENTIAL_LOOP() __asm__ volatile("")

// Loops over tiles whose buffers never overlap: let the vectoriser skip its runtime alias checks.
#if defined(__clang__)
#define PL_NO_ALIAS_LOOP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define PL_NO_ALIAS_LOOP _Pragma("GCC ivdep")
#else
#define PL_NO_ALIAS_LOOP
#endif
