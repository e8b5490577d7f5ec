// The blocked GEMM built for AVX2 and FMA (its micro-kernel's k loop in assembly), with the
// flags CMakeLists.txt gives this file. The anonymous namespace keeps each build's code its own.
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#include "backends/cpu/gemm/gemm_dispatch.h"

namespace {
#include "backends/cpu/gemm/blocked_gemm.h"
}  // namespace

void palladium::cpu::gemm_avx2(const void* gemm_args) { pl_cpu::gemm_entry(gemm_args); }
#endif
