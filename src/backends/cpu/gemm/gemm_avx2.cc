// The blocked GEMM built for AVX2 and FMA (its micro-kernel's k loop in assembly);
// CMakeLists.txt gives this file its instruction-set flags. The anonymous namespace keeps this build's code apart from the others'.
#if defined(__x86_64__)
#include <stdint.h>

#include "backends/cpu/gemm/gemm_dispatch.h"

namespace {
#include "backends/cpu/gemm/blocked_gemm.h"
}  // namespace

void palladium::cpu::gemm_avx2(const void* gemm_args) { pl_cpu::gemm_entry(gemm_args); }
#endif
