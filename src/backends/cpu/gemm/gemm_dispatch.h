// The float32 GEMM that generated cpu kernels call through Launch::gemm_f32: compiled into the
// library once per instruction set and chosen for the CPU at run time.
//
// PALLADIUM_CPU_GEMM names one build instead of the CPU's best: avx512-6x64, avx512-8x32, avx2 or
// baseline (the x86-64 or other target's default instruction set); a build this CPU cannot run, or
// an unknown name, is an Error naming the variable.
#pragma once
#include <string>
#include <vector>

namespace palladium::cpu {

using GemmFunction = void (*)(const void* gemm_args);

// The build for this process's CPU (or PALLADIUM_CPU_GEMM's), and its name.
struct GemmChoice {
  GemmFunction run;
  const char* name;
};
GemmChoice gemm_for_this_cpu();

// Every build compiled into this library, by name (for tests).
std::vector<std::string> gemm_builds();

// One entry point per build, each defined in its own file (gemm_<build>.cc).
void gemm_baseline(const void* gemm_args);
#if defined(__x86_64__)
void gemm_avx2(const void* gemm_args);
void gemm_avx512_6x64(const void* gemm_args);
void gemm_avx512_8x32(const void* gemm_args);
#endif

}  // namespace palladium::cpu
