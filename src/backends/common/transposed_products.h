// Products computed transposed, so that a dot's A operand stays in registers.
//
// The attention backward's dK/dV scan computes p = exp(q k^T - lse) and ds = p * (dout v^T - di)
// with q rows down the tile, then reads them transposed: dv += p^T dout, dk += ds^T q. A Hopper
// warpgroup MMA takes A from registers only untransposed, so each transposed tile went through
// shared memory (a store, a proxy fence and a barrier per tile per iteration). This pass finds
// such groups: values that reach a dot's A operand only through `transpose (1, 0)`, computed by
// dots, elementwise ops and broadcasts, and read nowhere else. It computes the whole group
// transposed instead (C^T = B^T A^T for its dots: k q^T, v dout^T), so the transposes vanish and
// the accumulator layout of k q^T is exactly the A fragment of p^T dout. The rules per op family
// are the table in transposed_products.cc. Each element is computed by the same operations on the
// same operands, only its place in the tile moves (a dot may sum its products in another order).
#pragma once

#include "ir/ir.h"

namespace palladium::backend {

// The kernel with every such group computed transposed; an unchanged copy where none applies.
ir::Kernel transpose_register_products(const ir::Kernel& kernel);

}  // namespace palladium::backend
