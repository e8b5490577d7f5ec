// Dots issued as early as their operands allow, beside the dot before them.
//
// On Hopper a warpgroup MMA runs asynchronously: the code after it runs while the tensor cores
// work, until something reads its result. The attention backward's loops are written
// s = q k^T; p = exp(s - lse); dv += p^T dout; dp = dout v^T - di; ... so each dot waited for
// the work before it although dout v^T needs neither s nor p. This pass moves each dot that
// depends on no other dot of its region (with the instructions it needs) up to just after the
// region's first dot: the two are then issued together and the softmax between them runs while
// the second is on the tensor cores. Only instructions without effects move, and loads only from
// refs the kernel never writes, so every value and every memory read is what it was.
#pragma once

#include "ir/ir.h"

namespace palladium::backend {

// The kernel with its independent dots moved, those that sum at least `min_contraction` products
// an element (shorter ones may not cover the work they are moved past); an unchanged copy where
// none can move.
ir::Kernel issue_independent_dots_early(const ir::Kernel& kernel, int64_t min_contraction = 1);

}  // namespace palladium::backend
