// The blocked GEMM built for the target's default instruction set (SSE2 on x86-64); CMakeLists.txt gives this file its
// instruction-set flags. The anonymous namespace keeps this build's code apart from the others'.
#include <stdint.h>

#include "backends/cpu/gemm/gemm_dispatch.h"

namespace {
#include "backends/cpu/gemm/blocked_gemm.h"
}  // namespace

void palladium::cpu::gemm_baseline(const void* gemm_args) { pl_cpu::gemm_entry(gemm_args); }
