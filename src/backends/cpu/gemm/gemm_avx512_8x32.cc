// The blocked GEMM built for AVX-512, 8 x 32 tiles with KC 256, with the flags CMakeLists.txt
// gives this file. The anonymous namespace keeps each build's code its own.
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#include "backends/cpu/gemm/gemm_dispatch.h"

#define PL_GEMM_AVX512_TILE 2
namespace {
#include "backends/cpu/gemm/blocked_gemm.h"
}  // namespace

void palladium::cpu::gemm_avx512_8x32(const void* gemm_args) { pl_cpu::gemm_entry(gemm_args); }
#endif
