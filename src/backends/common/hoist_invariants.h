// Loop-invariant code motion for the compiled backends' kernels.
//
// A kernel written as Pallas kernels are (a loop body traced from a Python-style closure)
// recomputes inside the loop what depends only on values from outside it: the seed attention's
// causal mask reshapes its invariant row of key positions, `span_k[None, :]`, at every step. On
// CUDA such a reshape is an exchange through shared memory between two barriers, which no
// compiler after us can move. This pass moves every pure instruction of a `for` body whose
// operands are all defined outside the loop (or by instructions moved before it) in front of the
// loop, innermost loops first, so invariants climb as far as they can.
//
// Only small values move (at most kMaxHoistedElements elements): each stays live across the whole
// loop, in registers a tile of the loop's own would otherwise use. Memory ops, dots, effects and
// control flow stay where they are.
#pragma once
#include <cstdint>

#include "ir/ir.h"

namespace palladium::backend {

inline constexpr int64_t kMaxHoistedElements = 1024;

// The kernel with loop invariants moved out of its `for` loops (the same kernel where none move).
ir::Kernel hoist_loop_invariants(ir::Kernel kernel);

}  // namespace palladium::backend
