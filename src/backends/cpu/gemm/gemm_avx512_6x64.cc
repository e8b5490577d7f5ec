// The blocked GEMM built for AVX-512, 6 x 64 tiles with KC 384, with the flags CMakeLists.txt
// gives this file. The anonymous namespace keeps each build's code its own.
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#include "backends/cpu/gemm/gemm_dispatch.h"

#define PL_GEMM_AVX512_TILE 1
namespace {
#include "backends/cpu/gemm/blocked_gemm.h"
}  // namespace

void palladium::cpu::gemm_avx512_6x64(const void* gemm_args) { pl_cpu::gemm_entry(gemm_args); }
#endif
