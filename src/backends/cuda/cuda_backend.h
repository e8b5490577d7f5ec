// The CUDA backend: IR -> CUDA C++ -> NVRTC -> cubin -> driver API launch (see cuda_backend.cc).
#pragma once
#include "backends/backend.h"

namespace palladium::cuda {
backend::Backend& backend();
// Compile-only mode, for machines without a GPU: the backend reports itself available when
// NVRTC is, compiles every kernel for `arch` (CUDA C++ -> NVRTC -> cubin, failing on any compile
// error) and then runs it with the interpreter. Also switched on by PALLADIUM_CUDA_COMPILE_ONLY=1.
void set_compile_only(bool on, int sm = 90);
bool compile_only();
// Kernels compiled with NVRTC by this process (compile-only mode included).
int kernels_compiled();

// Kernel timing for benchmarks: when on, every launch is bracketed by CUDA events and
// last_launch_ms() waits for the latest launch and returns its device time.
void set_launch_timing(bool on);
double last_launch_ms();

// Forgets the in-memory table of loaded modules, so the next compile goes to the disk cache.
void clear_module_cache();
// A persistent launch's block count where the programs' work grows along the axis walked fastest
// (GeneratedKernel::balance_length): at most `resident`, coprime to `length`, or `programs`.
int64_t balanced_blocks(int64_t programs, int64_t resident, int64_t length);
}  // namespace palladium::cuda
