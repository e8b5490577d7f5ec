// Sequential grid chains as loops inside one program, their resident blocks kept as loop carries.
//
// JAX's Pallas matmul tests (and most TPU-style kernels) walk a reduction along an `arbitrary`
// grid axis: the output block is initialised at program_id(k) == 0 and accumulated at every step.
// Run as written, each step reads the block back from memory and its input tiles arrive one step
// at a time. This pass rewrites such a kernel into the one a user would write with the loop inside:
//  - the axis becomes a `for` inside one program (the grid keeps it with extent 1);
//  - an input whose block walks the axis (origin = program_id * block size along a dimension, or
//    the program id itself along a squeezed one) takes the whole walk as its block, and each access
//    inside the loop adds the step's offset;
//  - every ref the chain writes must keep its block along the axis and be accessed whole (full-block
//    loads and stores, also under `if`): it becomes a loop carry, stored once after the loop and
//    started from the block's contents, or from the constant stored at step 0.
// The backends' loop machinery then applies (CUDA: cp.async prefetch and pipelined wgmma). Kernels
// of any other shape are left as they are: the result is empty.
#pragma once
#include <optional>

#include "ir/ir.h"

namespace palladium::backend {

std::optional<ir::Kernel> chains_as_loops(const ir::Kernel& kernel);

// The kernel a compiled backend generates code for: chains_as_loops's result where it applies,
// unless `checks` is on (a checked run reports the interpreter's program and block, which the
// rewrite changes) or PALLADIUM_CHAIN_LOOPS=0.
ir::Kernel kernel_for_codegen(const ir::Kernel& kernel, bool checks);

}  // namespace palladium::backend
