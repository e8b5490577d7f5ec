// The blocked GEMM built for the target's default instruction set (SSE2 on x86-64). The
// anonymous namespace keeps each build's code its own.
#include <stdint.h>

#include "backends/cpu/gemm/gemm_dispatch.h"

namespace {
#include "backends/cpu/gemm/blocked_gemm.h"
}  // namespace

void palladium::cpu::gemm_baseline(const void* gemm_args) { pl_cpu::gemm_entry(gemm_args); }
